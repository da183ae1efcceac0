"""The outer-loop arithmetic of Kaldi's nnet3 driver (steps/libs/nnet3/train/common.py)."""
import math

from nnet_tools.errors import NnetError


def passes_per_archive(chunk_training, frames_per_eg):
    """An epoch's passes over each archive: one with chunk training (every frame of an eg at once),
    frames-per-eg with nnet2's --frame scheme (one label position per pass: 'virtual archives')."""
    return 1 if chunk_training else frames_per_eg


def num_iters(num_epochs, num_archives, frames_per_eg, jobs_initial, jobs_final):
    """(num_iters, num_archives_to_process); each label position of an archive is a 'virtual archive'."""
    to_process = int(num_epochs * num_archives * frames_per_eg)
    return int(2 * to_process / (jobs_initial + jobs_final)), to_process


def current_num_jobs(it, iters, start, end, step=1):
    ideal = start + (end - start) * it / iters
    if ideal < step:
        return int(0.5 + ideal)
    return int(0.5 + ideal / step) * step


def effective_learning_rate(it, iters, archives_processed, archives_to_process, initial, final):
    """Exponential decay in data seen; the last iteration uses the final rate exactly."""
    if it + 1 >= iters:
        return final
    return initial * math.exp(archives_processed / archives_to_process * math.log(final / initial))


def shrink_factor(proportional_shrink, lr):
    """--trainer.optimization.proportional-shrink: the scale 1 - p * lr (lr = the jobs' actual
    learning rate) applied to every parameter at the start of each iteration's jobs
    (nnet-train-one-job --scale, Kaldi's nnet3-copy --scale). Kaldi stops if it is <= 0.5."""
    shrink = 1.0 - proportional_shrink * lr
    if shrink <= 0.5:
        raise NnetError(f"proportional-shrink={proportional_shrink} is too large, it gives shrink-value={shrink}")
    return shrink


def combine_iters(iters, num_archives_expanded, jobs_final, max_models_combine=20):
    """Iterations whose models nnet-combine considers (get_model_combine_iters)."""
    per_epoch = num_archives_expanded / jobs_final
    initial = min(int(per_epoch / 2) + 1, int(iters / 2))
    if initial > max_models_combine:
        stride = int(initial / max_models_combine)
        chosen = set(range(iters - initial + 1, iters + 1, stride))
    else:
        k = min(max_models_combine, iters // 2)
        chosen = set(range(iters - k + 1, iters + 1))
    chosen.add(iters)
    return sorted(chosen)


def keep_model(it, preserve_interval, combine_set):
    return it % preserve_interval == 0 or it in combine_set


def plan(num_epochs, num_archives, frames_per_eg, jobs_initial, jobs_final, initial_lrate, final_lrate, jobs_step=1):
    """Every iteration's (iteration, jobs, effective lrate, archives processed before it)."""
    iters, to_process = num_iters(num_epochs, num_archives, frames_per_eg, jobs_initial, jobs_final)
    out, processed = [], 0
    for it in range(iters):
        jobs = current_num_jobs(it, iters, jobs_initial, jobs_final, jobs_step)
        lrate = effective_learning_rate(it, iters, processed, to_process, initial_lrate, final_lrate)
        out.append((it, jobs, lrate, processed))
        processed += jobs
    return out
