"""Job launching: ``[options] [JOB=1:N] LOG COMMAND...`` run as array tasks on a backend.

A backend is a Backend subclass (backend.py) registered here by name; the launcher line is
parsed once (spec.py), engine flags come from the queue config (config.py), and every task
log has Kaldi's header and footer (tasklog.py).
"""
from nnet_tools.errors import NnetError
from nnet_tools.queue.backend import Backend, Interrupted, run as run_backend
from nnet_tools.queue.local import LocalBackend
from nnet_tools.queue.sge import SgeBackend
from nnet_tools.queue.slurm import SlurmBackend
from nnet_tools.queue.spec import JobSpec, parse_args, quote_command

BACKENDS = {"local": LocalBackend, "slurm": SlurmBackend, "sge": SgeBackend}


def backend_class(name):
    if name not in BACKENDS:
        raise NnetError(f"unknown backend '{name}' (known: {', '.join(sorted(BACKENDS))})")
    return BACKENDS[name]


def run(backend, spec, prog="nnet-queue"):
    """Run ``spec`` (a JobSpec) on the backend named ``backend``; return the exit code."""
    return run_backend(backend_class(backend), spec, prog)


def launch(backend, args, prog="nnet-queue"):
    """A launcher command line after the backend word -> exit code (bad input: NnetError)."""
    cls = backend_class(backend)
    return run_backend(cls, parse_args(args), prog)


__all__ = ["BACKENDS", "Backend", "Interrupted", "JobSpec", "launch", "parse_args", "quote_command", "run"]
