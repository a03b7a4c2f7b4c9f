"""A Pyro model and guide given as callables, held as one module (:class:`ModelAndGuide`)."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol, runtime_checkable

from torch import nn

__all__ = ["ModelAndGuide", "PyroPair", "model_and_guide"]


@runtime_checkable
class PyroPair(Protocol):
    """What :func:`ppl_vae.fit` trains and :func:`~ppl_vae.checks.posterior_predictive_check`
    checks: an object with a Pyro model and its guide as methods, both called with the data's
    keyword arguments (every model of :mod:`ppl_vae.models`, a :class:`ModelAndGuide`, or a
    module of yours)."""

    def model(self, *args: Any, **kwargs: Any) -> Any:
        """The Pyro model: ``pyro.sample`` sites, the observed ones at the data.

        :param args: positional arguments, as the model takes them.
        :param kwargs: the data's keyword arguments, e.g. ``x=batch``."""

    def guide(self, *args: Any, **kwargs: Any) -> Any:
        """Its guide: a site for each latent site of the model.

        :param args: positional arguments, as the model takes them.
        :param kwargs: the data's keyword arguments, e.g. ``x=batch``."""


class ModelAndGuide(nn.Module):
    """A Pyro model and its guide given as callables (functions, methods of modules, an
    autoguide such as ``AutoNormal(model)``), held as one module with ``model`` and ``guide``
    methods: the form :func:`ppl_vae.fit` trains and
    :func:`~ppl_vae.checks.posterior_predictive_check` checks, as Pyro's
    ``SVI(model, guide, ...)`` takes them.

    Its parameters are those of the modules among them (an autoguide, a module whose method
    the model or guide is) and of ``modules``; an autoguide adds its own on its first call. The
    callables run as they are, with Pyro's parameter store as they find it (as ``SVI`` runs
    them).

    Example: a model function, its autoguide, and the parameters they share:

    >>> import pyro, pyro.distributions as dist, torch
    >>> from pyro.infer.autoguide import AutoNormal
    >>> def model(x):
    ...     rate = pyro.sample("rate", dist.Gamma(1.0, 1.0))
    ...     with pyro.plate("points", x.shape[0]):
    ...         pyro.sample("x", dist.Poisson(rate), obs=x)
    >>> pair = ModelAndGuide(model, AutoNormal(model))
    >>> pair.guide(torch.ones(3))  # the autoguide creates its parameters on its first call
    {'rate': tensor(...)}
    >>> sorted(name for name, _ in pair.named_parameters())
    ['parts.0.locs.rate_unconstrained', 'parts.0.scales.rate_unconstrained']

    :param model: the Pyro model callable.
    :param guide: its guide callable.
    :param modules: networks the model or guide uses that are none of these modules, such as
        one a model function registers with ``pyro.module("decoder", decoder)``: their
        parameters are the pair's too (so :func:`ppl_vae.fit` trains them, as ``SVI`` trains
        what ``pyro.module`` registers).
    :raises TypeError: a ``model`` or ``guide`` that is not callable, an entry of ``modules``
        that is no ``nn.Module``.
    """

    def __init__(self, model: Callable, guide: Callable, modules: Iterable[nn.Module] = ()) -> None:
        super().__init__()
        if not callable(model) or not callable(guide):
            raise TypeError(f"with guide= given, model and guide must be callables (a Pyro model and its guide); "
                            f"got {type(model).__name__} and {type(guide).__name__}")
        modules = list(modules)
        for i, module in enumerate(modules):
            if not isinstance(module, nn.Module):
                raise TypeError(f"modules[{i}] must be an nn.Module, got {type(module).__name__}")
        self._callables = (model, guide)  # a tuple, so that a module among them is registered once, in parts
        owners = [model, guide, getattr(model, "__self__", None), getattr(guide, "__self__", None), *modules]
        #: The modules among the model and guide, and ``modules`` (each once): their parameters are the pair's.
        self.parts = nn.ModuleList(list({id(m): m for m in owners if isinstance(m, nn.Module)}.values()))

    def model(self, *args: Any, **kwargs: Any) -> Any:
        """Run the model callable with these arguments.

        :param args: its positional arguments.
        :param kwargs: its keyword arguments (the data, e.g. ``x=batch``)."""
        return self._callables[0](*args, **kwargs)

    def guide(self, *args: Any, **kwargs: Any) -> Any:
        """Run the guide callable with these arguments.

        :param args: its positional arguments.
        :param kwargs: its keyword arguments (the data, e.g. ``x=batch``)."""
        return self._callables[1](*args, **kwargs)

    def extra_repr(self) -> str:
        """The model callable and the guide's type, in the module's ``repr``."""
        return f"model={self._callables[0]!r:.60}, guide={type(self._callables[1]).__name__}"


def model_and_guide(model: Any, guide: Callable | None = None) -> PyroPair:
    """What :func:`ppl_vae.fit` and :func:`~ppl_vae.checks.posterior_predictive_check` run:
    ``model`` itself when ``guide`` is ``None`` (an object with ``model()`` and ``guide()``
    methods, such as every model of :mod:`ppl_vae.models`), else ``ModelAndGuide(model, guide)``.

    :param model: an object with ``model`` and ``guide`` methods, or a Pyro model callable.
    :param guide: the guide of the model callable ``model``; ``None`` when ``model`` has a
        ``guide`` method.
    :raises TypeError: an object without one of the methods and no ``guide``; a ``guide``
        given beside an object that has its own; callables that are not.
    """
    if guide is not None:
        if callable(getattr(model, "guide", None)) and callable(getattr(model, "model", None)):
            raise TypeError(f"model {type(model).__name__} has its own guide() method; give it alone, or give its "
                            "model method (model.model) with guide=")
        return ModelAndGuide(model, guide)
    for name in ("model", "guide"):
        if not callable(getattr(model, name, None)):
            given = type(model).__name__ + (f" {model.__name__!r}" if hasattr(model, "__name__") else "")
            raise TypeError(
                "model must have model() and guide() methods (every model of ppl_vae.models, or an nn.Module of "
                "yours holding a Pyro model and its guide as methods), or be a Pyro model callable given with its "
                f"guide (guide=); got {given}, which has no {name}() method"
            )
    return model
