"""The disentanglement metrics reported beside the standard Factor score, at one scale."""
from __future__ import annotations

import math

from ppl_vae.metrics._factor_data import Encode, FactorDataset, check_integers
from ppl_vae.metrics.beta_vae import beta_vae_score
from ppl_vae.metrics.dci import DCIModel, dci
from ppl_vae.metrics.factor_score import factor_score
from ppl_vae.metrics.mig import mig
from ppl_vae.metrics.sap import sap_score


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
    :param encode_batch_size, progress: passed to every metric.
    :returns: ``{"factor_score_parted", "mig", "sap", "dci_disentanglement",
        "dci_completeness", "dci_informativeness", "beta_vae"}``, floats.
    :raises ValueError: ``votes`` not an integer >= 2, and every error of the metrics.
    """
    check_integers(votes=(votes, 2))
    common = {"seed": seed, "encode_batch_size": encode_batch_size, "progress": progress}
    total = math.prod(int(size) for size in dataset.factor_sizes)
    subset = 100 * votes if 100 * votes < total else None
    points = min(10_000, 5 * votes)
    parted = factor_score(encode, dataset, protocol="parted", num_images=subset, **common)
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
