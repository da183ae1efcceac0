"""--use-gpu and --num-threads, as Kaldi programs take them."""
import os

import torch

from nnet_tools.errors import NnetError
from nnet_tools.log import logger


def select(use_gpu):
    """'yes' / 'wait' use CUDA when present and fall back to CPU with a warning; 'no' is CPU.

    Under a cluster engine CUDA_VISIBLE_DEVICES already names the GPU the job was given."""
    if use_gpu not in ("yes", "no", "wait", "optional"):
        raise NnetError(f"--use-gpu must be yes, no, wait or optional, got {use_gpu!r}")
    if use_gpu == "no":
        return torch.device("cpu")
    if torch.cuda.is_available():
        dev = torch.device("cuda")
        logger.info(f"Using GPU {torch.cuda.get_device_name(dev)} "
                    f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})")
        return dev
    logger.warning("--use-gpu=%s but no CUDA device is available; running on CPU.", use_gpu)
    return torch.device("cpu")


MAX_THREADS = 1024  # far beyond any node; torch's thread pools crash on absurd counts


def set_threads(num_threads):
    """--num-threads: 0 keeps torch's default."""
    if not 0 <= num_threads <= MAX_THREADS:
        raise NnetError(f"--num-threads must be 0 (torch's default) or 1..{MAX_THREADS}, got {num_threads}")
    if num_threads > 0:
        torch.set_num_threads(num_threads)
