"""Run a local task so that it cannot outlive the launcher: ``guard.py PARENT_PID COMMAND...``.

The local backend starts each task as this small process, the leader of the task's own
process group, with the command as its child. On Linux the kernel sends it SIGUSR2 when the
launcher dies (prctl PR_SET_PDEATHSIG), however it dies (kill -9 included); it then kills its
whole process group, so no task goes on writing into a log that a new run may own. Otherwise
it waits for the command and exits as the command did (same code, or same signal), so the
launcher reads the task's status exactly as if it had run the command itself.

When the launcher stops the task (SIGTERM to its group), the task's shell dies at once, but the
programs of its pipeline (``a | b``) are still cleaning up (temp files, their last line): the
guard adopts them (a child subreaper) and waits for them too, within the launcher's grace.

After the command it prints the task's peak memory (PEAK_LINE: the largest resident set of
the command and the processes it waited for, as GNU time's %M) into the log, before the
launcher's ``# Accounting`` line; not for a task stopped by a signal, whose log the launcher
or engine ends. Cluster wrappers run it too, with parent 0: no launcher to
watch there, the engine stops the task.

Standard library only, run by file path without site (python3 -S -E): every task pays its
start-up time.
"""
import ctypes
import os
import resource
import signal
import sys

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PARENT_DIED = signal.SIGUSR2
PEAK_LINE = "# Peak memory: {} kB"   # tasklog.peak_memory_kb reads it


def _kill_group(signum=None, frame=None):
    os.killpg(0, signal.SIGKILL)


def _prctl(option, value):
    """Linux's prctl; False where it is missing or refused."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _die_with_parent(parent):
    """Arrange SIGUSR2 -> kill the group when ``parent`` dies; False where Linux's prctl is missing."""
    signal.signal(PARENT_DIED, _kill_group)
    if not _prctl(PR_SET_PDEATHSIG, int(PARENT_DIED)):
        return False
    if os.getppid() != parent:   # it died before prctl took effect
        _kill_group()
    return True


def _reap_all():
    """Wait for every process left to this one: the task's, orphaned by its shell (subreaper)."""
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return


def _keep_priority():
    """Give the task's new session the priority its launcher ran at. Where the kernel groups
    CPU time by session (sched_autogroup), a nice value only ranks processes within their own
    session, so a lowered priority (the driver's background diagnostics) would be lost here;
    the session's own nice value carries it across sessions."""
    niceness = os.nice(0)
    if niceness > 0:
        try:
            with open("/proc/self/autogroup", "w") as f:
                f.write(str(niceness))
        except OSError:   # no autogroup here, or rate-limited: plain nice still holds
            pass


def main(argv):
    parent, command = int(argv[0]), argv[1:]
    if parent:
        _die_with_parent(parent)
    _keep_priority()
    # The launcher stops a task by signalling its group, child included: wait for the child's
    # end. A handler (not SIG_IGN) is reset by exec, so the child gets these signals as usual.
    stopped = []
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, lambda signum, frame: stopped.append(signum))
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    code = os.waitstatus_to_exitcode(os.waitpid(os.posix_spawnp(command[0], command, os.environ), 0)[1])
    if stopped:   # the launcher or engine that stopped it writes the log's end
        _reap_all()
    else:         # every process waited for counts; Linux's ru_maxrss is in kB
        print(PEAK_LINE.format(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss), flush=True)
    if code < 0:   # killed by a signal: end the same way, so the launcher logs 'signal N'
        if -code not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        code = 128 - code
    sys.exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
