"""Write the intersphinx inventories (``objects.inv``) of the projects the API reference links to.

    python docs/inventories/make_inventories.py     # rewrites docs/inventories/<project>.inv

The documentation builds offline, so the inventories the projects publish cannot be downloaded
at build time. This script writes one for each project instead, holding just the names our
pages refer to (:data:`DOCUMENTED`), each under the name the project's own documentation gives
it and with the page and anchor of that documentation (``tensors.html#torch.Tensor`` under
``https://pytorch.org/docs/stable/``). Every name is looked up in the installed package, so a
name the installed version lacks fails the script instead of linking to nothing; the role
(class, function, ...) and the version come from the package as well.

``docs/conf.py`` points ``intersphinx_mapping`` at each project's site with the file written
here as its inventory. A new outside name in a docstring fails ``sphinx-build -n``: add it to
:data:`DOCUMENTED` (with its page) and rerun this script.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import sys
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Project:
    """One project's documentation: where it lives and how a documented name maps to its page.

    :param name: the inventory's file name and intersphinx key (``torch`` -> ``torch.inv``).
    :param title: the project's name as its documentation writes it.
    :param distribution: the installed distribution whose version the inventory records.
    :param url: the root of the project's documentation; the pages below are relative to it.
    :param page: the page (relative to ``url``, without anchor) documenting a name.
    """

    name: str
    title: str
    distribution: str | None
    url: str
    page: Callable[[str, object], str]


def _python_page(name: str, obj: object) -> str:
    if "." not in name:  # a builtin
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            return "library/exceptions.html"
        if name in {"str", "dict", "list", "tuple", "bytes", "set", "frozenset"}:
            return "library/stdtypes.html"
        return "library/constants.html" if obj is None else "library/functions.html"
    return f"library/{name.rpartition('.')[0]}.html"


def _torch_page(name: str, obj: object) -> str:
    special = {"torch.Tensor": "tensors.html", "torch.device": "tensor_attributes.html",
               "torch.dtype": "tensor_attributes.html", "torch.Size": "size.html",
               "torch.optim.Optimizer": "optim.html"}
    if name in special:
        return special[name]
    if name.startswith("torch.utils.data."):
        return "data.html"
    if name.startswith("torch.distributions."):
        return "distributions.html"
    return f"generated/{name}.html"


#: Pyro's pages, by the module (or prefix) their names start with (docs/source/*.rst of pyro-ppl).
PYRO_PAGES = {"pyro.distributions": "distributions.html", "pyro.infer.autoguide": "infer.autoguide.html",
              "pyro.infer.inspect": "infer.util.html",
              "pyro.infer": "inference_algos.html", "pyro.nn": "nn.html", "pyro.poutine": "poutine.html",
              "pyro.optim": "optimization.html", "pyro": "primitives.html"}


def _pyro_page(name: str, obj: object) -> str:
    return next(page for prefix, page in PYRO_PAGES.items() if name.startswith(f"{prefix}."))


PROJECTS = {project.name: project for project in [
    Project("python", "Python", None, "https://docs.python.org/3/", _python_page),
    Project("torch", "PyTorch", "torch", "https://pytorch.org/docs/stable/", _torch_page),
    Project("pyro", "Pyro", "pyro-ppl", "https://docs.pyro.ai/en/stable/", _pyro_page),
    Project("numpy", "NumPy", "numpy", "https://numpy.org/doc/stable/",
            lambda name, obj: "reference/random/generator.html" if name.startswith("numpy.random.")
            else f"reference/generated/{name}.html"),
    Project("matplotlib", "Matplotlib", "matplotlib", "https://matplotlib.org/stable/",
            lambda name, obj: f"api/_as_gen/{name}.html"),
    Project("arviz", "ArviZ", "arviz", "https://python.arviz.org/en/stable/",
            lambda name, obj: f"api/generated/{name}.html"),
    Project("lightning", "PyTorch Lightning", "lightning", "https://lightning.ai/docs/pytorch/stable/",
            lambda name, obj: f"api/{name}.html"),
]}

#: The names our pages refer to, as each project documents them (its own inventory's names).
#: A name our docstrings write otherwise (``torch.nn.modules.module.Module``, ``Tensor``) is
#: resolved to the entry of the same object here by ``docs/conf.py``.
DOCUMENTED: dict[str, list[str]] = {
    "python": ["int", "float", "bool", "str", "bytes", "dict", "list", "tuple", "set", "frozenset",
               "object", "type", "None", "ValueError", "TypeError", "KeyError", "RuntimeError",
               "FileNotFoundError", "NotImplementedError",
               "collections.abc.Callable", "collections.abc.Iterable", "collections.abc.Iterator",
               "collections.abc.Mapping", "collections.abc.Sequence",
               "os.PathLike", "pathlib.Path", "argparse.ArgumentParser"],
    "torch": ["torch.Tensor", "torch.device", "torch.dtype", "torch.Size", "torch.Generator",
              "torch.nn.Module", "torch.nn.Sequential", "torch.nn.parameter.Parameter",
              "torch.optim.Optimizer", "torch.utils.data.Dataset", "torch.utils.data.DataLoader",
              "torch.distributions.distribution.Distribution", "torch.distributions.normal.Normal",
              "torch.distributions.kl.kl_divergence"],
    "pyro": ["pyro.distributions.Distribution", "pyro.distributions.TorchDistribution",
             "pyro.distributions.torch_distribution.TorchDistributionMixin",
             "pyro.distributions.Normal", "pyro.distributions.Laplace", "pyro.distributions.StudentT",
             "pyro.distributions.MixtureSameFamily",
             "pyro.infer.svi.SVI", "pyro.infer.elbo.ELBO", "pyro.infer.trace_elbo.Trace_ELBO",
             "pyro.infer.trace_mean_field_elbo.TraceMeanField_ELBO", "pyro.infer.predictive.Predictive",
             "pyro.nn.module.PyroModule", "pyro.poutine.Trace", "pyro.poutine.messenger.Messenger",
             "pyro.infer.inspect.render_model"],
    "numpy": ["numpy.ndarray", "numpy.random.Generator"],
    "matplotlib": ["matplotlib.figure.Figure", "matplotlib.axes.Axes"],
    "arviz": ["arviz.InferenceData"],
    "lightning": ["lightning.pytorch.core.LightningModule", "lightning.pytorch.trainer.trainer.Trainer",
                  "lightning.pytorch.callbacks.Callback", "lightning.pytorch.callbacks.TQDMProgressBar",
                  "lightning.pytorch.strategies.Strategy", "lightning.pytorch.strategies.DDPStrategy",
                  "lightning.pytorch.loggers.logger.Logger", "lightning.pytorch.plugins.io.TorchCheckpointIO"],
}


def imported(dotted: str) -> object:
    """The object ``dotted`` names: a builtin, a module, or an attribute of one; AttributeError
    or ImportError naming ``dotted`` when the installed packages have no such object."""
    if "." not in dotted:
        import builtins
        if dotted == "None":
            return None
        return getattr(builtins, dotted)
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:]:
            value = getattr(value, part)
        return value
    raise ImportError(f"{dotted}: no installed module")


def role(obj: object, name: str) -> str:
    """The Python-domain object type documenting ``obj`` (``class``, ``function``, ...)."""
    if inspect.ismodule(obj):
        return "module"
    if inspect.isclass(obj):
        return "exception" if issubclass(obj, BaseException) else "class"
    if callable(obj):
        return "function"
    return "data"


def entries(project: Project) -> Iterator[str]:
    """The inventory lines of ``project``: ``name domain:role priority uri dispname``."""
    for name in sorted(DOCUMENTED[project.name]):
        obj = imported(name)
        yield f"{name} py:{role(obj, name)} 1 {project.page(name, obj)}#$ -"


def version(project: Project) -> str:
    if project.distribution is None:
        return f"{sys.version_info.major}.{sys.version_info.minor}"
    return importlib.metadata.version(project.distribution)


def write(project: Project, directory: Path = HERE) -> Path:
    """Write ``project``'s inventory (Sphinx inventory version 2) into ``directory``."""
    header = (f"# Sphinx inventory version 2\n# Project: {project.title}\n# Version: {version(project)}\n"
              "# The remainder of this file is compressed using zlib.\n")
    body = "".join(f"{line}\n" for line in entries(project))
    path = directory / f"{project.name}.inv"
    path.write_bytes(header.encode() + zlib.compress(body.encode(), 9))
    return path


def documented_names(path: Path) -> list[str]:
    """The names an inventory written by :func:`write` holds."""
    data = path.read_bytes()
    body = data.split(b"\n", 4)[4]
    return [line.split(" ", 1)[0] for line in zlib.decompress(body).decode().splitlines()]


def main() -> int:
    for project in PROJECTS.values():
        print(write(project))
    return 0


if __name__ == "__main__":
    sys.exit(main())
