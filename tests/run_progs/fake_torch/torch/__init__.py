"""A stand-in for PyTorch in tests/test_run_torch.sh: only what hbm.torch.use() touches."""
from . import cuda  # noqa: F401
