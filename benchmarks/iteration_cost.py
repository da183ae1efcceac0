"""A cost model of one outer-loop iteration on a cluster (docs/cost-model.md has the derivation).

An iteration is: launch an N-task array; each job reads the model and its egs from shared disk,
trains, writes its model; one averaging job reads the N models and writes the average (or, with
a fan-in K < N, G = ceil(N/K) averaging jobs in parallel write partial averages that one more job
averages); the diagnostics run meanwhile in the background. Every transfer goes through shared
disk: a node streams at min(node link, aggregate / nodes streaming at once).

``Constants`` holds what benchmarks/cost_model.py measures (per parameter where the cost scales
with model size, so a 20M-parameter measurement predicts a 200M-parameter model); ``Cluster`` the
stated bandwidths. Times are seconds, sizes bytes, rates per second.
"""
import dataclasses
import math

BYTES_PER_PARAM = 4   # float32 model files


@dataclasses.dataclass
class Constants:
    job_rate: float          # parameter-egs per second of one job (egs/s = job_rate / params)
    program_start: float     # a program's start (Python, torch, nnet_tools imports)
    load_per_param: float    # model file -> network in memory, file in page cache
    save_per_param: float    # network -> model file in page cache (serialise + copy)
    average_per_param: float  # nnet-average-models' cost per input model per parameter, page cache
    launch_fixed: float      # an array of trivial tasks through $cmd, submit to seen finished:
    launch_wave: float       # launch_fixed + launch_wave x (rounds of tasks the slots take)
    egs_bytes: float         # bytes a job reads per eg
    launch_per_task: float = 0.0  # the controller's dispatch cost per task (not measurable on one node)
    diag_egs: int = 20000    # valid + train diagnostic egs (Kaldi: 10000 frames each)


@dataclasses.dataclass
class Cluster:
    node_bw: float           # one node's link to the shared disk, bytes/s
    nfs_bw: float            # the shared disk's aggregate bandwidth, bytes/s
    slots: float = math.inf  # tasks that run at once (a cluster: a node each; here: the cores)

    def per_node(self, streaming):
        """Bandwidth of each of ``streaming`` nodes reading or writing at once."""
        return min(self.node_bw, self.nfs_bw / max(1, min(streaming, self.slots)))


@dataclasses.dataclass
class Iteration:
    """The terms of one iteration's wall time, in the order the driver waits for them."""
    launch: float
    job_compute: float
    job_io: float
    job_cpu: float           # program start, model load and save
    queueing: float          # jobs waiting for slots held by other jobs or the diagnostics
    averaging: float
    diagnostics: float       # background, other nodes: counts only where it outlasts the rest

    @property
    def job(self):
        return self.job_compute + self.job_io + self.job_cpu

    @property
    def total(self):
        return max(self.launch + self.job + self.queueing + self.averaging, self.diagnostics)


def launch(c, cl, tasks):
    return c.launch_fixed + c.launch_wave * math.ceil(tasks / min(tasks, cl.slots)) + c.launch_per_task * tasks


def job_cost(c, cl, jobs, params, egs):
    """(compute, io, cpu) of each of ``jobs`` concurrent jobs."""
    bw = cl.per_node(jobs)
    model_bytes = BYTES_PER_PARAM * params
    compute = egs * params / c.job_rate
    io = (2 * model_bytes + egs * c.egs_bytes) / bw
    cpu = c.program_start + (c.load_per_param + c.save_per_param) * params
    return compute, io, cpu


def average_step(c, cl, models, params, parallel=1):
    """One averaging job of ``models`` inputs, ``parallel`` such jobs streaming at once (no launch)."""
    bw = cl.per_node(parallel)
    return (c.program_start + models * (c.average_per_param * params + BYTES_PER_PARAM * params / bw)
            + c.save_per_param * params + BYTES_PER_PARAM * params / bw)


def averaging_cost(c, cl, jobs, params, fanin=0):
    """Flat (fanin 0, or jobs <= fanin): one job over all models. Else a tree of two levels:
    ceil(jobs / fanin) group averages as one array, then one job over the partials."""
    if not fanin or jobs <= fanin:
        return launch(c, cl, 1) + average_step(c, cl, jobs, params)
    groups = math.ceil(jobs / fanin)
    per_group = math.ceil(jobs / groups)
    return (launch(c, cl, groups) + average_step(c, cl, per_group, params, parallel=groups)
            * math.ceil(groups / min(groups, cl.slots))
            + launch(c, cl, 1) + average_step(c, cl, groups, params))


def diagnostic_tasks(c, cl, params):
    """compute-prob on the valid and on the train subset (forward only: ~1/3 of a training
    step per eg), and show-progress (two models)."""
    read = c.program_start + c.load_per_param * params + BYTES_PER_PARAM * params / cl.node_bw
    forward = c.diag_egs / 2 * params / (3 * c.job_rate)
    return [read + forward, read + forward, read + c.load_per_param * params + BYTES_PER_PARAM * params / cl.node_bw]


def makespan(durations, slots):
    """Tasks started in order, each on the first free of ``slots`` slots: when the last ends."""
    free = [0.0] * int(min(slots, len(durations)))
    for d in durations:
        i = free.index(min(free))
        free[i] += d
    return max(free)


def iteration(c, cl, jobs, params, egs, fanin=0):
    compute, io, cpu = job_cost(c, cl, jobs, params, egs)
    diag = diagnostic_tasks(c, cl, params)
    queueing = 0.0
    if jobs + len(diag) > cl.slots:   # one host: the background diagnostics take slots first
        queueing = makespan(diag + [compute + io + cpu] * jobs, cl.slots) - (compute + io + cpu)
    return Iteration(launch=launch(c, cl, jobs), job_compute=compute, job_io=io, job_cpu=cpu, queueing=queueing,
                     averaging=averaging_cost(c, cl, jobs, params, fanin),
                     diagnostics=launch(c, cl, 1) + max(diag))

def speedup(c, cl, jobs, params, egs, fanin=0):
    """Samples/s with ``jobs`` jobs over samples/s with one, each job training ``egs`` egs."""
    return jobs * iteration(c, cl, 1, params, egs).total / iteration(c, cl, jobs, params, egs, fanin).total


def averaging_limit(c, cl, params, egs, share=0.10, fanin=0, most=1 << 16):
    """The smallest job count whose averaging takes more than ``share`` of the iteration (None up
    to ``most``): doubling until it does, then bisecting (the share grows with the jobs)."""
    def over(n):
        it = iteration(c, cl, n, params, egs, fanin)
        return it.averaging > share * it.total
    n = 1
    while not over(n):
        n *= 2
        if n > most:
            return None
    low = n // 2           # not over (or 0)
    while n - low > 1:
        mid = (low + n) // 2
        low, n = (low, mid) if over(mid) else (mid, n)
    return n


def flattening_point(c, cl, params, egs, gain=1.5, fanin=0, most=1 << 16):
    """The smallest power-of-two job count N where doubling to 2N raises samples/s by less than
    ``gain`` x (ideal: 2x): past it, more jobs buy little (None up to ``most``)."""
    n = 1
    while n <= most:
        if speedup(c, cl, 2 * n, params, egs, fanin) < gain * speedup(c, cl, n, params, egs, fanin):
            return n
        n *= 2
    return None
