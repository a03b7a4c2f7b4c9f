"""What :func:`~ppl_vae.fit` does with the first batch before training: create an autoguide's
parameters, and check one trace of the guide and the model."""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import pyro
import torch
from pyro import poutine

from ppl_vae.infer.observations import check_observations_in_support, warn_if_minibatches_unscaled
from ppl_vae.infer.steps import auxiliary_steps
from ppl_vae.models.pair import ModelAndGuide
from ppl_vae.train.batches import TensorBatches
from ppl_vae.train.module import SVIModule

__all__ = ["check_first_batch", "create_guide_parameters", "first_inputs", "refuse_untrained_params"]


def first_inputs(batches: TensorBatches, groups: Sequence[str]) -> dict[str, torch.Tensor]:
    """The tensors of ``groups`` in the first batch of ``batches``, by key (the keyword arguments
    of the model and guide); ``batches`` is put back at its start.

    :param batches: the run's batches, before training.
    :param groups: the data groups the ELBO step reads."""
    start = batches.start
    first = next(iter(batches))
    batches.seek(start)
    return {key: value for name in groups for key, value in first[name].items()}


def refuse_untrained_params(parameters: Iterable[torch.Tensor]) -> None:
    """Refuse the ``pyro.param`` sites of Pyro's parameter store whose tensors are not among
    ``parameters`` (those fit's optimisers own): they would stay at their initial values.

    :param parameters: the parameters the optimisers train.
    :raises ValueError: naming the sites."""
    trained = {id(parameter) for parameter in parameters}
    untrained = sorted(name for name, value in pyro.get_param_store().named_parameters() if id(value) not in trained)
    if untrained:
        registered = sorted({name.split("$$$")[0] for name in untrained if "$$$" in name})
        networks = (f"; {registered} are networks registered with pyro.module: give them to the pair, "
                    f"fit(ModelAndGuide(model, guide, modules=[...]), ...)") if registered else ""
        raise ValueError(
            f"the model or guide creates pyro.param sites {untrained} that fit would not train (its optimisers "
            "own model.parameters()): make them attributes of a module (nn.Parameter, or pyro.nn.PyroParam for a "
            f"constrained one; for a model function, an autoguide or a PyroModule as its guide){networks}"
        )


def create_guide_parameters(pair: ModelAndGuide, objective: object, batches: TensorBatches) -> None:
    """Call the guide of ``pair`` once on the first batch, so that an autoguide creates its
    parameters before the optimisers are built over them (as Pyro's autoguides are used with
    a torch optimiser: ``guide(data)``, then ``Adam(guide.parameters())``), in a parameter store
    of its own. No gradient is taken and torch's CPU random state is forked, so training draws
    what it would have drawn.

    :param pair: the model and guide.
    :param objective: the ELBO (the data groups its auxiliary steps take are not the guide's).
    :param batches: the run's batches, before training.
    :raises ValueError: the guide creates ``pyro.param`` sites that are no parameters of the pair."""
    if batches.num_batches == 0:
        return
    claimed = {step.data_group for step in auxiliary_steps(objective, pair)}
    inputs = first_inputs(batches, [group for group in batches.groups if group not in claimed])
    with pyro.get_param_store().scope(), torch.random.fork_rng(devices=[]), torch.no_grad():
        pair.guide(**inputs)
        refuse_untrained_params(pair.parameters())


def check_first_batch(module: SVIModule) -> None:
    """Trace the guide and the model once on the first ELBO batch, in a parameter store of their
    own, and refuse before training what training could not use: observations outside the
    support of their likelihood (``check_observations_in_support`` of
    :mod:`ppl_vae.infer.observations`) and ``pyro.param`` sites whose tensors are not
    parameters of the model (or of the objective's auxiliary steps), which the torch
    optimisers would never update (:func:`refuse_untrained_params`). It warns when the model
    has global latents and its observed sites count a minibatch as if it were the data set
    (``warn_if_minibatches_unscaled`` of :mod:`ppl_vae.infer.observations`, on the first ELBO group
    drawn in minibatches).

    The batches are put back at their start, and the random state of torch's CPU generator
    is forked, so training draws what it would have drawn without the check.

    :param module: the training module, before training starts: its model and guide are
        traced on the first batch of its batches (the data groups of the ELBO step, with
        their tensors ``(B, ...)``), and its parameters (model and auxiliary networks) are
        those the optimisers train.
    :raises ValueError: naming the site and the data's range, or the ``pyro.param`` names.
    """
    batches, model = module.batches, module.model
    if batches.num_batches == 0:
        return
    inputs = first_inputs(batches, module.elbo_groups)
    with pyro.get_param_store().scope(), torch.random.fork_rng(devices=[]), torch.no_grad(), \
            pyro.validation_enabled(False):
        guide_trace = poutine.trace(model.guide).get_trace(**inputs)
        model_trace = poutine.trace(poutine.replay(model.model, trace=guide_trace)).get_trace(**inputs)
        refuse_untrained_params(module.parameters())
    check_observations_in_support(model_trace)
    for name in module.elbo_groups:
        if batches.batch_sizes[name] < batches.rows(name):
            warn_if_minibatches_unscaled(model_trace, batches.batch_sizes[name], batches.rows(name))
            break
