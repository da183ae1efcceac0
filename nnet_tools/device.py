"""--use-gpu and --num-threads, as Kaldi programs take them."""
import os

import torch

from nnet_tools.errors import NnetError
from nnet_tools.log import logger


def cuda_missing():
    """Why no CUDA device is usable here, or None when one is."""
    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None:
        return "this torch is a CPU build"
    return f"torch sees no CUDA device (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})"


def select(use_gpu):
    """Kaldi's --use-gpu: 'yes' and 'wait' need a CUDA device and fail without one (an engine's
    GPU job runs where CUDA_VISIBLE_DEVICES already names its GPU); 'optional' uses one when
    present, else the CPU with a warning; 'no' is the CPU."""
    if use_gpu not in ("yes", "no", "wait", "optional"):
        raise NnetError(f"--use-gpu must be yes, no, wait or optional, got {use_gpu!r}")
    if use_gpu == "no":
        return torch.device("cpu")
    missing = cuda_missing()
    if missing is None:
        dev = torch.device("cuda")
        logger.info(f"Using GPU {torch.cuda.get_device_name(dev)} "
                    f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})")
        return dev
    if use_gpu != "optional":
        raise NnetError(f"--use-gpu={use_gpu} but no CUDA GPU is usable ({missing}); use --use-gpu=no, or "
                        f"--use-gpu=optional to fall back to the CPU")
    logger.warning("--use-gpu=optional but no CUDA GPU is usable (%s); running on CPU.", missing)
    return torch.device("cpu")


MAX_THREADS = 1024  # far beyond any node; torch's thread pools crash on absurd counts


def set_threads(num_threads):
    """--num-threads: 0 keeps torch's default."""
    if not 0 <= num_threads <= MAX_THREADS:
        raise NnetError(f"--num-threads must be 0 (torch's default) or 1..{MAX_THREADS}, got {num_threads}")
    if num_threads > 0:
        torch.set_num_threads(num_threads)
