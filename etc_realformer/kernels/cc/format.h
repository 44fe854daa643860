// Generated from etc_realformer/kernels/format.py (`cc_header`);
// do not edit by hand. The score codes and the kernels' names.
#ifndef ETC_REALFORMER_KERNELS_CC_FORMAT_H_
#define ETC_REALFORMER_KERNELS_CC_FORMAT_H_

#include <cstdint>

namespace etc_kernels {

constexpr int8_t kMasked = -128;
constexpr int8_t kNoId = -1;
constexpr int8_t kMaxId = 126;
constexpr int64_t kBandRowBytes = 16;
constexpr char kForwardTarget[] = "etc_branch_forward";
constexpr char kBackwardTarget[] = "etc_branch_backward";
constexpr char kForwardKernel[] = "branch_forward";
constexpr char kQueriesKernel[] = "branch_backward_queries";
constexpr char kKeysKernel[] = "branch_backward_keys";

}  // namespace etc_kernels

#endif  // ETC_REALFORMER_KERNELS_CC_FORMAT_H_
