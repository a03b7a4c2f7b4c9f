"""Evaluation metrics. They take arrays (torch or numpy) or an encode callable, never a model.

- :func:`factor_score`: Factor (FactorVAE) disentanglement score, "standard" protocol
  (disentanglement_lib) or "parted" (the PartedVAE authors' variant).
- :func:`hoyer_sparsity`: Hoyer sparsity of std-normalised representations (Decomposition VAE).
- :func:`classification_accuracy`, :func:`clustering_accuracy`: accuracy of q(c|x), the latter
  under the best matching of cluster ids to labels.
- :func:`silhouette`: silhouette score of an embedding against labels (Contrastive VAE).
"""
from ppl_vae.metrics.accuracy import classification_accuracy, clustering_accuracy
from ppl_vae.metrics.aggregate import aggregate_posterior_mismatch
from ppl_vae.metrics.factor_score import FactorDataset, FactorScoreResult, factor_score
from ppl_vae.metrics.silhouette import silhouette
from ppl_vae.metrics.sparsity import hoyer_sparsity

__all__ = [
    "aggregate_posterior_mismatch",
    "FactorDataset",
    "FactorScoreResult",
    "classification_accuracy",
    "clustering_accuracy",
    "factor_score",
    "hoyer_sparsity",
    "silhouette",
]
