"""PNG plots of one or more experiment dirs overlaid, and an index.html (what Kaldi's
steps/nnet3/report/generate_plots.py draws, without its LaTeX/PDF step).

Figures are built on matplotlib's object API with the Agg canvas, so no display, no pyplot
global state and no LaTeX are involved. matplotlib is an optional extra (``plots``)."""
import atexit
import html
import os
import re
import shutil
import tempfile

from nnet_tools.errors import NnetError
from nnet_tools.fileio import atomic_path, write_text
from nnet_tools.report import series as series_mod

PERCENTILE_BAND = (5.0, 95.0)    # the band drawn around each nonlinearity statistic's mean
NONLIN_STATS = (("value-avg", "value"), ("deriv-avg", "derivative"), ("oderiv-rms", "output-derivative rms"))


def _config_dir_for_matplotlib():
    """Where HOME is not writable (a service account, a read-only home on a node), matplotlib
    warns and leaves a temp dir in /tmp at every run: give it one that is removed at exit."""
    if "MPLCONFIGDIR" in os.environ:
        return
    default = os.path.join(os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config"), "matplotlib")
    try:
        os.makedirs(default, exist_ok=True)
        if os.access(default, os.W_OK):
            return
    except OSError:
        pass
    os.environ["MPLCONFIGDIR"] = tempfile.mkdtemp(prefix="nnet-report-matplotlib.")
    atexit.register(shutil.rmtree, os.environ["MPLCONFIGDIR"], ignore_errors=True)


def _figure_class():
    _config_dir_for_matplotlib()
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError:
        raise NnetError("--plots needs matplotlib, which is not installed "
                        "(pip install 'nnet-tools[plots]')") from None
    matplotlib.rcParams["text.usetex"] = False
    return Figure


def _colors(n):
    import matplotlib
    cycle = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    return [cycle[i % len(cycle)] for i in range(n)]


def _safe(name):
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


class _Plotter:
    """Draws each figure, records the series it drew (read back from the artists), saves it."""

    def __init__(self, out_dir, runs, x_axis="iteration"):
        self.Figure = _figure_class()
        self.out_dir, self.runs, self.x_axis = out_dir, runs, x_axis
        self.per = "per iteration" if x_axis == "iteration" else "against frames trained on"
        self.colors = _colors(len(runs))
        self.drawn = {}      # file name -> {line label: (iterations, values)}

    def xs(self, run, its):
        """The x of iterations ``its``: the iterations, or with x_axis 'samples' the frames trained
        on before each (i.mdl, whose diagnostics are iteration i's, has seen iterations 0..i-1)."""
        return list(its) if self.x_axis == "iteration" else [run.samples_before[i] for i in its]

    def xy(self, run, points):
        """{iteration: value} as (x, y) lists; iterations without a sample count are left out."""
        its = sorted(i for i in points if self.x_axis == "iteration" or i in run.samples_before)
        return self.xs(run, its), [points[i] for i in its]

    def save(self, fig, name, title, styles=()):
        """Legend: one colour per exp dir, then ``styles`` ((line style or 'band', meaning), ...)."""
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
        from matplotlib.ticker import MaxNLocator
        fig.suptitle(title)
        for ax in fig.axes:
            ax.grid(True)
            if self.x_axis == "iteration":
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        fig.axes[-1].set_xlabel("Iteration" if self.x_axis == "iteration" else "Samples (frames trained on)")
        handles = [Line2D([], [], color=c, label=run.exp_dir) for run, c in zip(self.runs, self.colors)]
        handles += [Patch(color="grey", alpha=0.3, label=what) if style == "band" else
                    Line2D([], [], color="black", linestyle=style, label=what) for style, what in styles]
        fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0),
                   ncol=2 if len(handles) > 3 else 1, fontsize="small")
        self.drawn[name] = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
                            for ax in fig.axes for line in ax.get_lines()}
        with atomic_path(os.path.join(self.out_dir, name)) as tmp:
            fig.savefig(tmp, format="png", dpi=80, bbox_inches="tight")

    def prob(self, key):
        fig = self.Figure(figsize=(7, 4.5))
        ax = fig.add_subplot()
        for run, color in zip(self.runs, self.colors):
            for subset, style in (("train", "--"), ("valid", "-")):
                if run.prob[key][subset]:
                    ax.plot(*self.xy(run, run.prob[key][subset]), style, color=color, label=f"{subset} {run.exp_dir}")
        ax.set_ylabel(key)
        self.save(fig, f"{key}.png", f"{key} {self.per} ('output')", (("--", "train"), ("-", "valid")))

    def param_diff(self, layer):
        fig = self.Figure(figsize=(7, 6))
        axes = fig.subplots(2, 1, sharex=True)
        for run, color in zip(self.runs, self.colors):
            for ax, kind in zip(axes, ("absolute", "relative")):
                if layer in run.param_diff[kind]:
                    ax.plot(*self.xy(run, run.param_diff[kind][layer]), color=color, label=f"{kind} {run.exp_dir}")
        axes[0].set_ylabel("Parameter differences")
        axes[1].set_ylabel("Relative parameter differences")
        self.save(fig, f"param_diff_{_safe(layer)}.png", f"Parameter differences at {layer}")

    def nonlin(self, component):
        stats = [key for key, _ in NONLIN_STATS
                 if any(key in s for run in self.runs
                        for s in run.nonlin.get(component, {}).get("iterations", {}).values())]
        fig = self.Figure(figsize=(7, 3 * len(stats)))
        axes = fig.subplots(len(stats), 1, sharex=True, squeeze=False)[:, 0]
        kind = next(run.nonlin[component]["type"] for run in self.runs if component in run.nonlin)
        low, high = PERCENTILE_BAND
        for run, color in zip(self.runs, self.colors):
            per_iter = run.nonlin.get(component, {}).get("iterations", {})
            for ax, key in zip(axes, stats):
                its = [it for it in sorted(per_iter)
                       if key in per_iter[it] and (self.x_axis == "iteration" or it in run.samples_before)]
                if not its:
                    continue
                summaries = [per_iter[it][key] for it in its]
                x = self.xs(run, its)
                ax.plot(x, [s["mean"] for s in summaries], color=color, label=f"{key} mean {run.exp_dir}")
                band = [(s["percentiles"].get(low), s["percentiles"].get(high)) for s in summaries]
                if all(a is not None and b is not None for a, b in band):
                    ax.fill_between(x, [a for a, _ in band], [b for _, b in band], color=color, alpha=0.2,
                                    label=f"{key} {low:g}th-{high:g}th percentile {run.exp_dir}")
        for ax, key in zip(axes, stats):
            ax.set_ylabel(dict(NONLIN_STATS)[key])
        self.save(fig, f"nonlin_{_safe(component)}.png", f"Per-dimension statistics of {component} ({kind}Component)",
                  (("-", "mean over dimensions"), ("band", f"{low:g}th-{high:g}th percentile")))

    def jobs_lrate(self):
        fig = self.Figure(figsize=(7, 6))
        axes = fig.subplots(2, 1, sharex=True)
        for run, color in zip(self.runs, self.colors):
            if run.jobs:
                axes[0].plot(*self.xy(run, run.jobs), drawstyle="steps-post", color=color, label=f"jobs {run.exp_dir}")
            if run.lrate:
                axes[1].plot(*self.xy(run, run.lrate), color=color, label=f"learning rate {run.exp_dir}")
        from matplotlib.ticker import MaxNLocator
        axes[0].yaxis.set_major_locator(MaxNLocator(integer=True))
        axes[0].set_ylabel("Number of jobs")
        axes[1].set_ylabel("Learning rate per job")
        self.save(fig, "jobs_lrate.png", f"Parallel jobs and per-job learning rate {self.per}")


def write_plots(out_dir, exp_dirs, summary_text="", x_axis="iteration"):
    """PNGs of ``exp_dirs`` overlaid, and out_dir/index.html showing them under ``summary_text``;
    ``x_axis`` 'samples' draws against the frames trained on (runs with different job counts
    compared at equal data) instead of the iteration.

    Returns {png name: {line label: (iterations, values)}}: the series each figure holds, read
    back from its artists before saving."""
    runs = [series_mod.read(d) for d in exp_dirs]
    for run in runs:
        if not any(run.prob["accuracy"].values()) and not run.jobs:
            raise NnetError(f"{run.exp_dir}: no compute_prob or train logs under {run.exp_dir}/log; "
                            f"is it an experiment dir?")
    if x_axis not in ("iteration", "samples"):
        raise NnetError(f"x axis must be 'iteration' or 'samples', not '{x_axis}'")
    plotter = _Plotter(out_dir, runs, x_axis)
    for key in ("accuracy", "log-likelihood"):
        if any(run.prob[key][s] for run in runs for s in ("train", "valid")):
            plotter.prob(key)
    for layer in _ordered(layer for run in runs for layer in run.param_diff["relative"]):
        plotter.param_diff(layer)
    for component in _ordered(c for run in runs for c in run.nonlin):
        plotter.nonlin(component)
    if any(run.jobs or run.lrate for run in runs):
        plotter.jobs_lrate()
    write_text(os.path.join(out_dir, "index.html"), _index_html(exp_dirs, plotter.drawn, summary_text))
    return plotter.drawn


def _ordered(names):
    """Names in first-seen order (layers as the network orders them), without repeats."""
    return list(dict.fromkeys(names))


def _index_html(exp_dirs, drawn, summary_text):
    title = "nnet-report: " + ", ".join(exp_dirs)
    images = "\n".join(f'<h2>{html.escape(name[:-4])}</h2>\n<img src="{html.escape(name)}" alt="{html.escape(name)}">'
                       for name in drawn)
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title></head>\n"
            f"<body>\n<h1>{html.escape(title)}</h1>\n<pre>{html.escape(summary_text)}</pre>\n{images}\n</body></html>\n")
