"""The training engine: Lightning, checkpoints, run directories. Nothing else imports Lightning."""
from ppl_vae.train.batches import BatchBlocks, TensorBatches, as_groups
from ppl_vae.train.checkpoint import AtomicCheckpointIO, CheckpointError, read_checkpoint
from ppl_vae.train.config import TrainConfig
from ppl_vae.train.environment import drop_nvml_check_without_nvml
from ppl_vae.train.fit import FitResult, fit
from ppl_vae.train.metrics import CSVMetricsLogger, read_training_metrics
from ppl_vae.train.module import NonFiniteLossError, SVIModule
from ppl_vae.train.run_dir import RunDirectory, RunDirectoryExistsError, write_json_atomic
from ppl_vae.train.sweep import plan_sweep, run_sweep

drop_nvml_check_without_nvml()  # Lightning, imported above, set it

__all__ = [
    "AtomicCheckpointIO",
    "BatchBlocks",
    "CSVMetricsLogger",
    "CheckpointError",
    "FitResult",
    "NonFiniteLossError",
    "RunDirectory",
    "RunDirectoryExistsError",
    "SVIModule",
    "TensorBatches",
    "TrainConfig",
    "as_groups",
    "fit",
    "plan_sweep",
    "run_sweep",
    "read_checkpoint",
    "read_training_metrics",
    "write_json_atomic",
]
