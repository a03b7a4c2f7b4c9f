"""The disentanglement metrics reported beside the standard Factor score, at one scale."""
from __future__ import annotations

import math

from ppl_vae.metrics._factor_data import Encode, FactorDataset, check_integers
from ppl_vae.metrics.beta_vae import beta_vae_score
from ppl_vae.metrics.dci import DCIModel, dci
from ppl_vae.metrics.factor_score import factor_score
from ppl_vae.metrics.mig import mig
from ppl_vae.metrics.sap import sap_score


def factor_scores(
    encode: Encode,
    dataset: FactorDataset,
    *,
    votes: int = 10000,
    seed: int = 0,
    encode_batch_size: int = 1024,
    progress: bool = True,
) -> dict[str, float]:
    """The Factor score under both protocols at one scale, e.g. for a curve of score against
    training steps (``ppl_vae.train.PeriodicEvaluation(lambda model: factor_scores(model.encode,
    dataset, votes=300), every_n_steps=1000)``).

    - ``factor_score``: the standard protocol with ``votes`` training and ``votes // 2``
      evaluation votes, the pruning variance from max(2 x ``votes``, 1,000) images;
    - ``factor_score_parted``: the parted protocol on 100 x ``votes`` random images, as in
      :func:`disentanglement_scores`.

    :param encode: as in :func:`~ppl_vae.metrics.factor_score`.
    :param dataset: see :class:`~ppl_vae.metrics.FactorDataset`.
    :param votes: >= 2.
    :param seed: passed to both protocols.
    :param encode_batch_size: images per ``encode`` call, passed to both protocols.
    :param progress: progress bars, passed to both protocols.
    :returns: ``{"factor_score", "factor_score_parted"}``, floats.
    :raises ValueError: ``votes`` not an integer >= 2, and every error of
        :func:`~ppl_vae.metrics.factor_score`.
    """
    check_integers(votes=(votes, 2))
    common = {"seed": seed, "encode_batch_size": encode_batch_size, "progress": progress}
    standard = factor_score(encode, dataset, n_train=votes, n_eval=votes // 2, n_variance=max(2 * votes, 1000), **common)
    parted = factor_score(encode, dataset, protocol="parted", num_images=_parted_images(dataset, votes), **common)
    return {"factor_score": standard.score, "factor_score_parted": parted.score}


def _parted_images(dataset: FactorDataset, votes: int) -> int | None:
    """Images of the parted protocol at the scale of ``votes``: 100 x ``votes`` (about
    ``votes`` votes per factor), None (all) once that reaches the data set's size."""
    total = math.prod(int(size) for size in dataset.factor_sizes)
    return 100 * votes if 100 * votes < total else None


def disentanglement_scores(
    encode: Encode,
    dataset: FactorDataset,
    *,
    votes: int = 10000,
    seed: int = 0,
    dci_model: DCIModel = "forest",
    encode_batch_size: int = 1024,
    progress: bool = True,
) -> dict[str, float]:
    """The parted Factor score, MIG, SAP, DCI and the beta-VAE metric of one representation.

    The standard Factor score is left to the caller (its settings vary by recipe). Sizes
    follow ``votes``, the standard Factor score's training votes, so that a reduced
    evaluation is reduced everywhere:

    - ``factor_score_parted``: the parted protocol on a random subset of 100 x ``votes``
      images (about ``votes`` votes per factor), all images once that reaches the data
      set's size (the authors' full protocol: ``votes >= 7,373`` on dSprites);
    - ``mig``, ``sap``, ``dci_*``: min(10,000, 5 x ``votes``) training points and half as many
      test points (disentanglement_lib's 10,000 / 5,000 from 2,000 votes on);
    - ``beta_vae``: ``votes`` training points and ``votes // 2`` evaluation points of 64-image
      batches (disentanglement_lib's 10,000 / 5,000 at 10,000 votes).

    :param encode: as in :func:`~ppl_vae.metrics.factor_score`.
    :param dataset: see :class:`~ppl_vae.metrics.FactorDataset`.
    :param votes: >= 2.
    :param seed: passed to every metric.
    :param dci_model: see :func:`~ppl_vae.metrics.dci` (``"forest"`` by default here: the
        gradient-boosted trees take minutes per dSprites factor).
    :param encode_batch_size: images per ``encode`` call, passed to every metric.
    :param progress: progress bars, passed to every metric.
    :returns: ``{"factor_score_parted", "mig", "sap", "dci_disentanglement",
        "dci_completeness", "dci_informativeness", "beta_vae"}``, floats.
    :raises ValueError: ``votes`` not an integer >= 2, and every error of the metrics.
    """
    check_integers(votes=(votes, 2))
    common = {"seed": seed, "encode_batch_size": encode_batch_size, "progress": progress}
    points = min(10_000, 5 * votes)
    parted = factor_score(encode, dataset, protocol="parted", num_images=_parted_images(dataset, votes), **common)
    decomposition = dci(encode, dataset, n_train=points, n_test=points // 2, model=dci_model, **common)
    return {
        "factor_score_parted": parted.score,
        "mig": mig(encode, dataset, n_train=points, **common).score,
        "sap": sap_score(encode, dataset, n_train=points, n_test=points // 2, **common).score,
        "dci_disentanglement": decomposition.disentanglement,
        "dci_completeness": decomposition.completeness,
        "dci_informativeness": decomposition.informativeness,
        "beta_vae": beta_vae_score(encode, dataset, n_train=votes, n_eval=max(votes // 2, 1), **common).score,
    }
