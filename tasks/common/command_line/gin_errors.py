"""Gin's errors as one line, and bound values checked against their hints.

- `gin_error_text`: a gin parse error as "<file>, line N: <what>: <line>"
  (gin puts the place on a line of its own, or in a syntax error's fields);
- `check_gin_bindings`: every bound name against the parameters its
  configurable takes (through a class's `**kwargs` to its bases), and
  every bound value against its parameter's type hint, so that
  `TrainerConfig.train_steps = 'abc'` fails at its binding.
"""

import inspect
import re
import tokenize
import typing
from typing import Any, Dict, Optional, Sequence, Tuple

import gin

from etc_realformer import json_config
from etc_realformer.errors import UserInputError


# Where gin says a bad binding is: `In file "<path>", line N` or
# `In bindings string line N`, on a line of its own after the message.
_GIN_LOCATION = re.compile(
    r'^\s*In (?:file "(?P<file>[^"]*)", line (?P<line>\d+)|'
    r"bindings string line (?P<binding_line>\d+))\s*$")
# The location a gin syntax error puts at the end of its message:
# "(<file name>, line N)" or "(line N)".
_GIN_SYNTAX_LOCATION = re.compile(r"\s*\((?:[^()]*, )?line \d+\)\s*$")


def gin_error_text(error: BaseException, gin_bindings: Sequence[str] = (),
                   source: Optional[str] = None) -> str:
  """One line of a gin parse error: "<file>, line N: <what>: <the line>".

  Gin's message puts the location on a line of its own (a bad value or an
  unknown name) or, for a syntax error, into the exception's `filename`
  and `lineno`, after a first line from Python's `ast` that names neither
  ("malformed node or string ... <ast.Name object at 0x...>"). Bindings
  are parsed as one string, one binding per line: line N is the Nth
  binding. `source`: the file (or `--gin_bindings`) being parsed, named
  when gin's message names no place (an unbalanced bracket's
  `tokenize.TokenError`, a file that is not found).
  """
  if isinstance(error, tokenize.TokenError):
    what, (lineno, _) = error.args
    return f"{source or 'gin'}: {what} (unbalanced bracket or quote?) " \
           f"ending at line {lineno}"
  text = str(error).strip() or type(error).__name__
  lines = [line.rstrip() for line in text.splitlines() if line.strip()]
  where, source_line = None, None
  if isinstance(error, SyntaxError) and error.lineno is not None:
    where = (f"{error.filename}, line {error.lineno}" if error.filename
             else f"--gin_bindings line {error.lineno}")
    what = [line.strip() for line in lines if "<ast." not in line]
    what = [_GIN_SYNTAX_LOCATION.sub("", line) for line in what]
    if error.text and error.text.strip():
      source_line = error.text.strip()
    elif not error.filename:
      source_line = _binding_line(gin_bindings, error.lineno)
  else:
    what = []
    for i, line in enumerate(lines):
      match = _GIN_LOCATION.match(line)
      if match is None:
        if where is None:
          what.append(line.strip())
        continue
      if match["file"] is not None:
        where = f"{match['file']}, line {match['line']}"
      else:
        where = f"--gin_bindings line {match['binding_line']}"
      # Gin quotes the offending line next (and a caret under it).
      if i + 1 < len(lines):
        source_line = lines[i + 1].strip()
      break
  message = "; ".join(w.rstrip(".") for w in what if w) or type(error).__name__
  if source_line:
    message += f": {source_line}"
  if where is None and source and source not in message:
    where = source
  return f"{where}: {message}" if where else message


def _binding_line(gin_bindings: Sequence[str], lineno: int) -> Optional[str]:
  """Line `lineno` (1-based) of the bindings as gin joins them."""
  lines = "\n".join(gin_bindings).splitlines()
  return lines[lineno - 1].strip() if 0 < lineno <= len(lines) else None


def _holds_gin_reference(value: Any) -> bool:
  """Whether a bound value is (or holds) a gin reference or macro, whose
  value is known only when it is called."""
  if type(value).__module__.split(".")[0] == "gin":
    return True
  if isinstance(value, (list, tuple)):
    return any(_holds_gin_reference(v) for v in value)
  if isinstance(value, dict):
    return any(_holds_gin_reference(v) for v in value.values())
  return False


def check_gin_bindings() -> None:
  """Checks every bound name and value against what its configurable takes.

  Gin passes a value as written: `TrainerConfig.train_steps = 'abc'` or
  `optimizer.learning_rate = 'fast'` would otherwise fail far from its
  binding. Parameters without a hint, `**kwargs` (`etc_config`'s fields,
  checked by `EtcConfig`) and references (`@name`, `%MACRO`) are left to
  the code that reads them.

  Raises:
    UserInputError: "gin: <Configurable>.<parameter> = <value>: expected
      <type>", or "gin: <Configurable>.<name>: <Configurable> has no
      parameter <name>" for a name a class's `**kwargs` would take and its
      bases' `__init__` would refuse.
  """
  # Gin has no public listing of its bindings; without these the check is
  # skipped (the code that reads the values still checks the ones it can).
  bindings = getattr(gin.config, "_CONFIG", None)
  registry = getattr(gin.config, "_REGISTRY", None)
  if bindings is None or registry is None:
    return
  for (scope, selector), params in list(bindings.items()):
    configurable = registry.get_match(selector)
    if configurable is None:
      continue
    accepted = _accepted_parameters(configurable.wrapped)
    if accepted is None:
      continue  # Hints that do not resolve: nothing to check against.
    hints, defaults, names_known = accepted
    where = f"{scope}/" if scope else ""
    for name, value in params.items():
      if names_known and name not in defaults:
        raise UserInputError(
            f"gin: {where}{configurable.name}.{name}: "
            f"{configurable.name} has no parameter {name!r}; its "
            f"parameters: {', '.join(sorted(defaults))}")
      if name not in hints or _holds_gin_reference(value):
        continue
      if value is None and defaults.get(name, inspect.Parameter.empty) is None:
        continue  # `x: str = None`: None is the parameter's own default.
      if not json_config.value_matches(value, hints[name]):
        raise UserInputError(
            f"gin: {where}{configurable.name}.{name} = {value!r}: expected "
            f"{json_config.describe_type(hints[name])}")


def _accepted_parameters(target: Any) -> Optional[Tuple[
    Dict[str, Any], Dict[str, Any], bool]]:
  """(type hints, defaults, whether the names are all known) of what a
  configurable accepts; None where its hints do not resolve.

  Gin checks a binding's name against the signature, but a class whose
  `__init__` takes `**kwargs` accepts any name there and fails at the
  call, with a traceback (`WikiHopTask.train_files`, a typo of
  `train_input`). A class's `**kwargs` go up to its bases' `__init__`
  (the tasks' convention): the names are known when that chain ends in an
  `__init__` without `**kwargs`. A function's `**kwargs` (`etc_config`'s
  fields) are checked by the function itself.
  """
  chain = []
  if inspect.isclass(target):
    for cls in target.__mro__:
      init = cls.__dict__.get("__init__")
      if init is None or cls is object:
        continue
      chain.append(init)
      if not _takes_var_keyword(init):
        break
  else:
    chain.append(target)
  hints, defaults = {}, {}
  try:
    # The most derived class's hint and default win, as the call would.
    for function in reversed(chain):
      hints.update(typing.get_type_hints(function))
      defaults.update(
          (k, p.default) for k, p in inspect.signature(function).parameters
          .items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL))
  except Exception:  # pylint: disable=broad-except
    return None
  defaults.pop("self", None)
  names_known = bool(chain) and not _takes_var_keyword(chain[-1])
  return hints, defaults, names_known


def _takes_var_keyword(function: Any) -> bool:
  try:
    parameters = inspect.signature(function).parameters.values()
  except (TypeError, ValueError):
    return True  # Unknown: take it as accepting any name.
  return any(p.kind == p.VAR_KEYWORD for p in parameters)
