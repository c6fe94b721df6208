"""``pt.inspect`` support for the model transformers: their attributes are the arguments they were built with.

PyTerrier infers a transformer's attributes from ``__init__``'s parameters, read back as ``self.<name>``. A model
transformer keeps its settings inside the module it wraps (the window in the config, the lengths in the tokenizer
layout), and a name given to the constructor becomes a loaded module, so that inference fails
(``InspectError: Cannot identify attribute model``). :class:`InitArguments` records the arguments of the outermost
constructor call instead: :meth:`attributes` reports them, and :meth:`apply_attributes` calls the constructor again
with some replaced, so ``pt.inspect.transformer_apply_attributes(model, batch_size=64)`` works on every family.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import pyterrier as pt

#: where the recorded call lives on an instance
_CALL = "_init_arguments"


class InitArguments:
    """Mixin: records ``(args, kwargs)`` of the first ``__init__`` call on an instance (a subclass's ``__init__``
    calling its base's records nothing more) and implements PyTerrier's ``HasAttributes`` / ``HasApplyAttributes``
    protocols from it, and ``HasSubtransformers`` as none (a wrapped query model is part of the model, not a stage)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None or getattr(init, "_records_arguments", False):
            return

        @functools.wraps(init)
        def recording_init(self, *args, **kw):
            if _CALL not in self.__dict__:
                self.__dict__[_CALL] = (args, dict(kw))
            return init(self, *args, **kw)

        recording_init._records_arguments = True
        cls.__init__ = recording_init

    def _bound_arguments(self) -> inspect.BoundArguments:
        args, kwargs = self.__dict__.get(_CALL, ((), {}))
        signature = inspect.signature(type(self).__init__)
        return signature.bind(self, *args, **kwargs)

    def attributes(self) -> list[pt.inspect.TransformerAttribute]:
        """The constructor's parameters with the values this transformer was built with (defaults where not given);
        the entries of a ``**flags`` parameter as keyword attributes."""
        bound = self._bound_arguments()
        result = []
        for name, parameter in list(bound.signature.parameters.items())[1:]:
            if parameter.kind is inspect.Parameter.VAR_KEYWORD:
                for key, value in bound.arguments.get(name, {}).items():
                    result.append(_attribute(key, value, inspect.Parameter.empty, inspect.Parameter.KEYWORD_ONLY))
            elif parameter.kind is not inspect.Parameter.VAR_POSITIONAL:
                value = bound.arguments.get(name, parameter.default)
                result.append(_attribute(name, value, parameter.default, parameter.kind))
        return result

    def apply_attributes(self, **changes: Any) -> pt.Transformer:
        """A new transformer built with this one's arguments, ``changes`` replacing some (a name reloads the
        checkpoint; a module is shared)."""
        known = {attribute.name for attribute in self.attributes()}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise pt.inspect.InspectError(
                f"{type(self).__name__} has no attribute(s) {unknown}; it has {sorted(known)}"
            )
        bound = self._bound_arguments()
        args, kwargs = [], {}
        for name, parameter in list(bound.signature.parameters.items())[1:]:
            if parameter.kind is inspect.Parameter.VAR_KEYWORD:
                flags = dict(bound.arguments.get(name, {}))
                kwargs.update({key: changes.get(key, value) for key, value in flags.items()})
            elif parameter.kind is inspect.Parameter.VAR_POSITIONAL:
                args.extend(bound.arguments.get(name, ()))
            elif name in changes or name in bound.arguments:
                value = changes.get(name, bound.arguments.get(name))
                if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
                    args.append(value)
                else:
                    kwargs[name] = value
        return type(self)(*args, **kwargs)

    def subtransformers(self) -> dict:
        return {}


def _attribute(name: str, value: Any, default: Any, kind) -> pt.inspect.TransformerAttribute:
    return pt.inspect.TransformerAttribute(name=name, value=value, init_default_value=default, init_parameter_kind=kind)
