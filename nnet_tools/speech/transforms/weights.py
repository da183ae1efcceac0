"""Per-frame weights from an alignment, as Kaldi's LDA and MLLT accumulators get them:
``ali-to-post`` (weight 1 on the aligned transition-id's pdf), ``weight-silence-post`` (the
frames of silence phones scaled, by 0.0 in steps/train_lda_mllt.sh) and RandPrune, Kaldi's
randomized pruning of small posteriors (src/base/kaldi-math.h)."""
import numpy as np

from nnet_tools.errors import NnetError


def parse_phones(csl, where="--silence-phones"):
    """A colon-separated list of phone ids (lang/phones/silence.csl) -> sorted int array."""
    if csl is None or not str(csl).strip():
        return np.zeros(0, dtype=np.int64)
    try:
        phones = sorted({int(p) for p in str(csl).strip().split(":")})
    except ValueError:
        raise NnetError(f"{where}: expected colon-separated phone ids such as 1:2:3, got '{csl}'") from None
    if phones[0] < 1:
        raise NnetError(f"{where}: phone ids start at 1, got {phones[0]}")
    return np.array(phones, dtype=np.int64)


def tid_to_phone(model):
    """Array a with a[tid] = phone of transition-id tid (a[0] = 0: transition-ids start at 1)."""
    tm = model.tm
    return np.array([0] + [tm.transition_id_to_phone(t) for t in range(1, tm.num_transition_ids + 1)],
                    dtype=np.int64)


def frame_weights(tids, tid2phone, silence_phones=(), silence_weight=0.0):
    """ali-to-post | weight-silence-post: 1.0 per frame, ``silence_weight`` where the frame's
    phone is one of ``silence_phones``."""
    w = np.ones(len(tids))
    if len(silence_phones):
        w[np.isin(tid2phone[np.asarray(tids, dtype=np.int64)], silence_phones)] = silence_weight
    return w


def check_rand_prune(rand_prune):
    if not 0.0 <= rand_prune < np.inf:
        raise NnetError(f"--rand-prune must be >= 0, got {rand_prune}")


def rand_prune(posts, threshold, rng):
    """Kaldi's RandPrune, elementwise: a posterior p with 0 < |p| < threshold becomes
    sign(p) * threshold with probability |p| / threshold, else 0; others are kept. The
    expectation is unchanged; threshold 0 keeps all."""
    posts = np.asarray(posts, dtype=np.float64)
    if threshold <= 0.0:
        return posts
    small = (posts != 0.0) & (np.abs(posts) < threshold)
    if not small.any():
        return posts
    out = posts.copy()
    keep = rng.random(int(small.sum())) <= np.abs(posts[small]) / threshold
    out[small] = np.where(keep, np.sign(posts[small]) * threshold, 0.0)
    return out
