"""The native Java rules under rules_java's names.

A stand-in for rules_java, so that Bazel's own tools (which load
`@rules_java//java:defs.bzl`) need no download. This project builds no Java.
"""

java_binary = native.java_binary
java_import = native.java_import
java_library = native.java_library
java_lite_proto_library = native.java_lite_proto_library
java_package_configuration = native.java_package_configuration
java_plugin = native.java_plugin
java_proto_library = native.java_proto_library
java_runtime = native.java_runtime
java_test = native.java_test
java_toolchain = native.java_toolchain
