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
import torch

#: where the recorded call lives on an instance: ``(entry, args, kwargs)``, entry "__init__" or one of :data:`LOADERS`
_CALL = "_init_arguments"
#: where the first ``__init__`` call is kept (for a model loaded by name: the module the loader built)
_INIT = "_first_init_arguments"
#: what a model loaded by name knows of where it came from (repr, equality, card), kept when a change shares its module
IDENTITY = ("model_name", "source", "path", "card", "fresh_weights")
#: the class methods that build a model from a name; the outermost one called is what an instance records
LOADERS = ("from_pretrained", "from_bert")
#: parameters of ``__init__`` that ``from_pretrained`` fills from the checkpoint itself (never attributes of a model
#: loaded by name)
_FROM_CHECKPOINT = ("tokenizer", "query_tokenizer")


class InitArguments:
    """Mixin: records how an instance was built and implements PyTerrier's ``HasAttributes`` /
    ``HasApplyAttributes`` protocols from it, and ``HasSubtransformers`` as none (a wrapped query model is part of
    the model, not a stage).

    What is recorded: the outermost ``from_pretrained`` call that returned the instance (``Cls(name, ...)`` is one,
    through ``LoadsByName``), else the first ``__init__`` call (a subclass's ``__init__`` calling its base's records
    nothing more). Attributes are that call's parameters, and where it takes ``**kwargs``, the keyword parameters of
    the constructors they reach (``batch_size`` of the bi-encoder base), valued as given or, when not given, as the
    instance has them. :meth:`apply_attributes` builds the model again with some replaced: where the constructor takes
    every change, around the very module the loader built (nothing is read again, weights changed in memory stay; the
    name, repr and equality are kept), else by the recorded call (a name loads the checkpoint again)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None and not getattr(init, "_records_arguments", False):

            @functools.wraps(init)
            def recording_init(self, *args, **kw):
                if _CALL not in self.__dict__:
                    self.__dict__[_CALL] = ("__init__", args, dict(kw))
                    self.__dict__[_INIT] = (args, dict(kw))
                return init(self, *args, **kw)

            recording_init._records_arguments = True
            cls.__init__ = recording_init
        for entry in LOADERS:
            loader = cls.__dict__.get(entry)
            if isinstance(loader, classmethod) and not getattr(loader.__func__, "_records_arguments", False):
                setattr(cls, entry, classmethod(_recording_loader(entry, loader.__func__)))

    # -- what was called -----------------------------------------------------------------------------------------
    def _recorded(self) -> tuple[str, tuple, dict]:
        return self.__dict__.get(_CALL, ("__init__", (), {}))

    def _entry_parameters(self, entry: str) -> list[inspect.Parameter]:
        """The parameters of the recorded entry point (without ``self`` / ``cls``)."""
        if entry != "__init__":
            return list(inspect.signature(getattr(type(self), entry)).parameters.values())
        return list(inspect.signature(type(self).__init__).parameters.values())[1:]

    def _reached_parameters(self, entry: str, named: set[str]) -> list[inspect.Parameter]:
        """Keyword parameters that ``**kwargs`` of the entry reaches: the constructors down the MRO, each passing its
        own ``**kwargs`` on, without their first parameter (the module) and names already taken."""
        inits = [k.__dict__["__init__"] for k in type(self).__mro__ if "__init__" in k.__dict__ and k is not object]
        if entry == "__init__":
            inits = inits[1:]
        reached: list[inspect.Parameter] = []
        taken = set(named) | (set(_FROM_CHECKPOINT) if entry != "__init__" else set())
        for init in inits:
            parameters = list(inspect.signature(init).parameters.values())[2:]  # self and the module
            for parameter in parameters:
                plain = parameter.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
                if plain and parameter.name not in taken:
                    taken.add(parameter.name)
                    reached.append(parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY))
            if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
                break
        return reached

    def _given(self, record: tuple | None = None) -> tuple[str, list[inspect.Parameter], dict, dict]:
        """(entry, its parameters plus those reached through ``**kwargs``, named arguments given, ``**kwargs``
        entries given) of the recorded call (or ``record``)."""
        entry, args, kwargs = record or self._recorded()
        parameters = self._entry_parameters(entry)
        bound = inspect.Signature(parameters).bind_partial(*args, **kwargs).arguments
        given, flags = {}, {}
        for parameter in parameters:
            if parameter.kind is inspect.Parameter.VAR_KEYWORD:
                flags = dict(bound.get(parameter.name, {}))
            elif parameter.name in bound:
                given[parameter.name] = bound[parameter.name]
        variadic = (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
        plain = [p for p in parameters if p.kind not in variadic]
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            reached = self._reached_parameters(entry, {p.name for p in plain})
            extra = [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY) for k in flags if k not in
                     {p.name for p in reached}]  # fmt: skip
            plain += reached + extra
        return entry, plain, given, flags

    # -- the protocols ------------------------------------------------------------------------------------------
    def attributes(self) -> list[pt.inspect.TransformerAttribute]:
        """The recorded call's parameters with the values this transformer was built with (as the instance has them
        where not given, else the default)."""
        _entry, parameters, given, flags = self._given()
        result = []
        for parameter in parameters:
            if parameter.name in given or parameter.name in flags:
                value = given.get(parameter.name, flags.get(parameter.name))
            else:
                value = _current(self, parameter.name, parameter.default)
            result.append(_attribute(parameter.name, value, parameter.default, parameter.kind))
        return result

    def apply_attributes(self, **changes: Any) -> pt.Transformer:
        """A new transformer made by the recorded call with ``changes`` replacing some arguments (a name loads the
        checkpoint again; a module is shared)."""
        entry, parameters, given, flags = self._given()
        known = {p.name for p in parameters}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise pt.inspect.InspectError(
                f"{type(self).__name__} has no attribute(s) {unknown}; it has {sorted(known)}"
            )
        if entry != "__init__":
            shared = self._around_the_same_module(changes)
            if shared is not None:
                return shared
        return self._call(entry, parameters, {**given, **flags, **changes})

    def _around_the_same_module(self, changes: dict[str, Any]) -> pt.Transformer | None:
        """The model built by the first ``__init__`` (the loader's module and settings) with ``changes``, keeping
        :data:`IDENTITY` and the loader's record; None where that call took a name or does not take every change."""
        init = self.__dict__.get(_INIT)
        if init is None or not init[0] or not isinstance(init[0][0], torch.nn.Module):
            return None
        record = ("__init__", *init)
        _entry, parameters, given, flags = self._given(record)
        if not set(changes) <= {p.name for p in parameters}:
            return None
        model = self._call("__init__", parameters, {**given, **flags, **changes})
        for name in IDENTITY:
            if name in self.__dict__:
                model.__dict__[name] = self.__dict__[name]
        entry, args, kwargs = self._recorded()
        bound = inspect.signature(getattr(type(self), entry)).bind_partial(*args, **kwargs)
        for name, value in changes.items():
            if name in bound.signature.parameters and bound.signature.parameters[name].kind not in _VARIADIC:
                bound.arguments[name] = value
            else:
                var = next(p.name for p in bound.signature.parameters.values() if p.kind is _VAR_KEYWORD)
                bound.arguments[var] = {**bound.arguments.get(var, {}), name: value}
        model.__dict__[_CALL] = (entry, bound.args, bound.kwargs)
        return model

    def _call(self, entry: str, parameters: list[inspect.Parameter], values: dict[str, Any]) -> pt.Transformer:
        """``entry`` called with ``values`` (a model name stays positional: ``Cls(name)`` is ``from_pretrained``)."""
        args, kwargs, positional = [], {}, True
        for parameter in parameters:
            if parameter.name not in values:
                positional = positional and parameter.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD
                continue
            value = values[parameter.name]
            if parameter.kind is inspect.Parameter.POSITIONAL_ONLY or (
                parameter.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and positional
            ):
                args.append(value)
            else:
                positional = False
                kwargs[parameter.name] = value
        if entry != "__init__":
            return getattr(type(self), entry)(*args, **kwargs)
        return type(self)(*args, **kwargs)

    def subtransformers(self) -> dict:
        return {}


_VAR_KEYWORD = inspect.Parameter.VAR_KEYWORD
_VARIADIC = (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)


def _recording_loader(entry: str, function):
    """``function`` (a class method's function) recording its call on the model it returns."""

    @functools.wraps(function)
    def recording(klass, *args, **kw):
        model = function(klass, *args, **kw)
        if isinstance(model, InitArguments):  # the outermost call returns last, so its record stays
            model.__dict__[_CALL] = (entry, args, dict(kw))
        return model

    recording._records_arguments = True
    return recording


def _current(model: Any, name: str, default: Any) -> Any:
    """The instance's own value of a setting not given (a property may not exist on every family)."""
    try:
        return getattr(model, name, default)
    except Exception:  # a property that cannot answer for this instance
        return default


def _attribute(name: str, value: Any, default: Any, kind) -> pt.inspect.TransformerAttribute:
    return pt.inspect.TransformerAttribute(name=name, value=value, init_default_value=default, init_parameter_kind=kind)
