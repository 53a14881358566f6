"""Evaluate CloudFormation expressions of the REAL templates against a deployed (emulated) stack.

moto deploys the moto rendition (standins/rendition.py), where FSx, SageMaker::Cluster, Lambda and
custom resources are SSM-parameter stand-ins. The rehearsal then does what CloudFormation would
have done for those resources, with the properties the real templates give them: it evaluates
``Ref``, ``Fn::GetAtt``, ``Fn::Sub``, ``Fn::If`` ... here, taking parameter values and physical
ids from moto and attributes of the realized stand-ins from whoever realized them.

Intrinsic functions and pseudo parameters as documented in the CloudFormation User Guide
("Intrinsic function reference", "Pseudo parameters reference").
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import Any

from hpq.errors import OperationFailed

NO_VALUE = object()
_SUB_RE = re.compile(r"\$\{([^}!][^}]*)\}")


class EvalError(OperationFailed):
    pass


def _is_list(spec: dict[str, Any]) -> bool:
    kind = str(spec.get("Type", "String"))
    return kind.startswith("List<") or kind == "CommaDelimitedList"


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def constraint_problem(key: str, spec: dict[str, Any], value: Any) -> str | None:
    """Why CloudFormation refuses this value for the parameter, in its own words; None when it takes it.

    As the CloudFormation User Guide's "Parameters" section describes the constraints
    (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/parameters-section-structure.html):
    AllowedPattern must match the entire value, and for a CommaDelimitedList (or List<...>) each value in the
    list; AllowedValues likewise the value or each list item; MinLength/MaxLength count a String's characters;
    a Number (each item of a List<Number>) must be a number within MinValue/MaxValue. The messages follow
    CloudFormation's ValidationError ("Parameter 'X' must match pattern Y", "must be one of AllowedValues").
    """
    kind = str(spec.get("Type", "String"))
    items = [str(v) for v in value] if isinstance(value, list) else [str(value)]
    pattern = spec.get("AllowedPattern")
    allowed = spec.get("AllowedValues")
    numeric = kind in ("Number", "List<Number>")
    for item in items:
        if allowed is not None and item not in [str(a) for a in allowed]:
            return f"Parameter '{key}' must be one of AllowedValues"
        if pattern is not None and not re.fullmatch(str(pattern), item):
            return f"Parameter '{key}' must match pattern {pattern}"
        if numeric:
            number = _number(item)
            if number is None:
                return f"Parameter '{key}' must be a number"
            if "MinValue" in spec and number < float(spec["MinValue"]):
                return f"Parameter '{key}' must be a number not less than {spec['MinValue']}"
            if "MaxValue" in spec and number > float(spec["MaxValue"]):
                return f"Parameter '{key}' must be a number not greater than {spec['MaxValue']}"
    if kind == "String":
        text = items[0]
        if "MinLength" in spec and len(text) < int(spec["MinLength"]):
            return f"Parameter '{key}' must contain at least {spec['MinLength']} characters"
        if "MaxLength" in spec and len(text) > int(spec["MaxLength"]):
            return f"Parameter '{key}' must contain at most {spec['MaxLength']} characters"
    return None


def check_parameter(stack: str, key: str, spec: dict[str, Any], value: Any) -> None:
    """EvalError naming the stack, the parameter, the value and the constraint, where CloudFormation would
    refuse the stack (or nested stack) create/update with a ValidationError."""
    problem = constraint_problem(key, spec, value)
    if problem is not None:
        hint = f" ({spec['ConstraintDescription']})" if spec.get("ConstraintDescription") else ""
        raise EvalError(f"{stack}: {problem}; value {value!r}{hint}")


class StackScope:
    """One stack's evaluation context: parameters, conditions, and how to resolve its resources.

    The parameters are checked against the template's constraints as CloudFormation checks them when it
    creates or updates the stack (a nested stack's with the values its parent gives): EvalError otherwise."""

    def __init__(self, name: str, template: dict[str, Any], parameters: dict[str, Any],
                 pseudo: dict[str, Any], ref: Callable[[str], Any], getatt: Callable[[str, str], Any]):
        self.name = name
        self.template = template
        self.pseudo = pseudo
        self._ref = ref
        self._getatt = getatt
        self.parameters: dict[str, Any] = {}
        declared = template.get("Parameters") or {}
        unknown = sorted(set(parameters) - set(declared))
        if unknown:  # CloudFormation's ValidationError for a parameter the template does not declare
            raise EvalError(f"{name}: Parameters: [{', '.join(unknown)}] do not exist in the template")
        for key, spec in declared.items():
            if key in parameters:
                value = parameters[key]
            elif "Default" in spec:
                value = spec["Default"]
            else:
                raise EvalError(f"{name}: parameter {key} has no value")
            if _is_list(spec):
                value = value if isinstance(value, list) else [v.strip() for v in str(value).split(",") if v.strip()]
            check_parameter(name, key, spec, value)
            self.parameters[key] = value
        self._conditions: dict[str, bool] = {}

    # ------------------------------------------------------------------ conditions

    def condition(self, name: str) -> bool:
        if name not in self._conditions:
            expr = (self.template.get("Conditions") or {}).get(name)
            if expr is None:
                raise EvalError(f"{self.name}: unknown condition {name}")
            self._conditions[name] = bool(self.evaluate(expr))
        return self._conditions[name]

    def resource_exists(self, logical: str) -> bool:
        res = (self.template.get("Resources") or {}).get(logical, {})
        return "Condition" not in res or self.condition(res["Condition"])

    # ------------------------------------------------------------------ evaluation

    def evaluate(self, node: Any) -> Any:
        value = self._eval(node)
        return None if value is NO_VALUE else value

    def _eval(self, node: Any) -> Any:
        if isinstance(node, list):
            return [v for v in (self._eval(x) for x in node) if v is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            (key, arg), = node.items()
            fn = _FUNCTIONS.get(key)
            if fn is not None:
                return fn(self, arg)
        return {k: v for k, v in ((k, self._eval(v)) for k, v in node.items()) if v is not NO_VALUE}

    def ref(self, name: str) -> Any:
        if name == "AWS::NoValue":
            return NO_VALUE
        if name in self.pseudo:
            return self.pseudo[name]
        if name in self.parameters:
            return self.parameters[name]
        if name in (self.template.get("Resources") or {}):
            return self._ref(name)
        raise EvalError(f"{self.name}: Ref to unknown {name}")

    def getatt(self, logical: str, attr: str) -> Any:
        if logical not in (self.template.get("Resources") or {}):
            raise EvalError(f"{self.name}: GetAtt on unknown resource {logical}")
        return self._getatt(logical, attr)

    def sub(self, arg: Any) -> str:
        text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], self._eval(arg[1]))

        def one(m: re.Match) -> str:
            key = m.group(1).strip()
            if key in variables:
                return str(variables[key])
            if "." in key and key.split(".", 1)[0] in (self.template.get("Resources") or {}):
                logical, attr = key.split(".", 1)
                return str(self.getatt(logical, attr))
            return str(self.ref(key))

        return _SUB_RE.sub(one, text).replace("${!", "${")


def _if(scope: StackScope, arg: list) -> Any:
    cond, yes, no = arg
    return scope._eval(yes if scope.condition(cond) else no)


def _join(scope: StackScope, arg: list) -> str:
    sep, items = arg
    values = scope._eval(items)
    return str(sep).join(str(v) for v in values)


def _select(scope: StackScope, arg: list) -> Any:
    index, items = scope._eval(arg[0]), scope._eval(arg[1])
    return items[int(index)]


def _split(scope: StackScope, arg: list) -> list[str]:
    sep, text = arg
    return str(scope._eval(text)).split(sep)


def _getatt(scope: StackScope, arg: Any) -> Any:
    logical, attr = arg if isinstance(arg, list) else arg.split(".", 1)
    return scope.getatt(logical, scope._eval(attr))


def _equals(scope: StackScope, arg: list) -> bool:
    a, b = scope._eval(arg[0]), scope._eval(arg[1])
    return str(a) == str(b)


def _cidr(scope: StackScope, arg: list) -> list[str]:
    block, count, bits = (scope._eval(x) for x in arg)
    net = ipaddress.ip_network(str(block))
    return [str(n) for n in list(net.subnets(new_prefix=net.max_prefixlen - int(bits)))[: int(count)]]


def _getazs(scope: StackScope, arg: Any) -> list[str]:
    region = scope._eval(arg) or scope.pseudo["AWS::Region"]
    return [f"{region}{z}" for z in "abcd"]


def _find_in_map(scope: StackScope, arg: list) -> Any:
    name, top, second = (scope._eval(x) for x in arg)
    return scope.template["Mappings"][name][top][second]


def _base64(scope: StackScope, arg: Any) -> str:
    import base64

    return base64.b64encode(str(scope._eval(arg)).encode()).decode()


_FUNCTIONS: dict[str, Callable[[StackScope, Any], Any]] = {
    "Ref": lambda s, a: s.ref(a),
    "Fn::GetAtt": _getatt,
    "Fn::Sub": lambda s, a: s.sub(a),
    "Fn::If": _if,
    "Fn::Join": _join,
    "Fn::Select": _select,
    "Fn::Split": _split,
    "Fn::Equals": _equals,
    "Fn::Not": lambda s, a: not s._eval(a[0]),
    "Fn::And": lambda s, a: all(s._eval(x) for x in a),
    "Fn::Or": lambda s, a: any(s._eval(x) for x in a),
    "Condition": lambda s, a: s.condition(a),
    "Fn::Cidr": _cidr,
    "Fn::GetAZs": _getazs,
    "Fn::FindInMap": _find_in_map,
    "Fn::Base64": _base64,
}
