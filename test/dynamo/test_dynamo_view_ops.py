"""An op sweep: in-place and out= ops of `op_db` writing views of eager tensors.

For every OpInfo of `op_db` that supports float32 on the CPU and has an
in-place variant, the test takes one sample input (the first non-empty one,
0-dim ones last, whose in-place application keeps its shape and runs on CPU
eager, twice, on the sample and on a permutation of it) and checks, under
`torch.compile(fn, backend='openxla')`, the writes of the op into views of one
eager XLA tensor `base = torch.stack([x, x_permuted])`:

  lone:        fn(base[1]) applies the op to the one view.
  two:         fn(v0, v1), `v0, v1 = base.unbind(0)`, applies it to both.
  two_donated: as two, but fn first marks both views with
               `torch.ops.xla.dynamo_set_buffer_donor_`.

For every OpInfo that supports float32 and out=, it checks

  out:         fn(base[1], *inputs) writes the op's result with `out=` into
               the view `base[1]` of a `(2, *result_shape)` base.

The compiled function is called twice on the same tensors, and the base and the
views are compared with the same program run eagerly on the CPU. On XLA, the
tensors of the sample's arguments are moved to the XLA device, and so is the
`device=` of factory functions (`torch.zeros(..., out=)`).

Every run starts from the same seed (`torch.manual_seed` on the CPU,
`xm.set_rng_state` on XLA). A case whose program eager XLA (the same program on
XLA tensors, not compiled) fails, or computes differently from the CPU, is
skipped with a reason starting with 'eager XLA:'; a case whose op fails
compiled on tensors that are not views too, with 'compiled XLA without
views:'. A case the sweep cannot check
(no sample fits, the result of out= is not one tensor, the op is random and
eager XLA draws other numbers than the CPU) is skipped with a reason starting
with 'not applicable:'.
See pytorch/xla#8832 and [Note: Graph inputs that are views] in
torch_xla/_dynamo/view_inputs.py.
"""
import re
import sys
import unittest

import torch
import torch._dynamo
import torch.utils._pytree as pytree
import torch_xla
import torch_xla.core.xla_model as xm
from torch.testing._internal.common_methods_invocations import op_db

_INPLACE_MODES = ('lone', 'two', 'two_donated')
_CALLS = 2

# Tolerances of float32 comparisons, and of ops whose XLA CPU kernels are less
# precise than ATen's.
_TOLERANCES = dict(rtol=1e-5, atol=1e-5)
_OP_TOLERANCES = {
    # tan applied twice to values near its poles: relative errors ~3e-5.
    'tan': dict(rtol=1e-4, atol=1e-4),
}


def _supports_float32(op):
  return torch.float32 in op.supported_dtypes('cpu')


def _to(tree, device):
  return pytree.tree_map(
      lambda a: a.to(device) if isinstance(a, torch.Tensor) else a, tree)


def _to_device(args, kwargs, device):
  """Moves a sample's tensors, and factory functions' outputs, to device."""
  args, kwargs = _to((args, kwargs), device)
  if 'device' in kwargs:
    kwargs = dict(kwargs, device=device)
  return args, kwargs


def _clone(tree):
  return pytree.tree_map(
      lambda a: a.clone() if isinstance(a, torch.Tensor) else a, tree)


def _permuted(x):
  # A permutation of x's values: different from x, but in the op's domain.
  return x.flatten().roll(1).reshape(x.shape)


def _fill(shape, dtype):
  values = torch.arange(torch.Size(shape).numel()) % 7 - 3
  if dtype == torch.bool:
    values = values > 0
  return values.reshape(shape).to(dtype)


class _Case:
  """An op's sample, and the programs of each mode with it."""

  def __init__(self, op, mode, sample, result=None):
    self.op = op
    self.mode = mode
    self.sample = sample
    self.result = result  # (shape, dtype) of out=.

  def setup(self, device, plain=False):
    """Returns the tensors to compare and the arguments of `fn`; `plain`:
    tensors of their own instead of the views."""
    s = self.sample
    args = _to_device(*_clone((s.args, s.kwargs)), device)
    if self.mode == 'out':
      base = _fill((2,) + tuple(self.result[0]), self.result[1]).to(device)
      view = base[1].clone() if plain else base[1]
      tensors = dict(view=view) if plain else dict(base=base, view=view)
      return tensors, (view, _to(_clone(s.input), device)) + args
    x = s.input.detach()
    base = torch.stack([x, _permuted(x)]).to(device)
    if self.mode == 'lone':
      view = base[1].clone() if plain else base[1]
      tensors = dict(view=view) if plain else dict(base=base, view=view)
      return tensors, ((view,),) + args
    v0, v1 = [v.clone() for v in base.unbind(0)] if plain else base.unbind(0)
    tensors = dict(v0=v0, v1=v1) if plain else dict(base=base, v0=v0, v1=v1)
    return tensors, ((v0, v1),) + args

  def fn(self, donate):
    op = self.op
    if self.mode == 'out':

      def fn(out, inp, args, kwargs):
        op.op(inp, *args, out=out, **kwargs)

      return fn

    def fn(views, args, kwargs):
      if donate:
        for v in views:
          torch.ops.xla.dynamo_set_buffer_donor_(v, True)
      for v in views:
        op.inplace_variant(v, *args, **kwargs)

    return fn

  def run(self, device, compile_fn=None, donate=False, seed=0, plain=False):
    if device == 'cpu':
      torch.manual_seed(seed)
    else:
      xm.set_rng_state(seed, device)
    tensors, fn_args = self.setup(device, plain)
    fn = self.fn(donate)
    if compile_fn is not None:
      fn = compile_fn(fn)
    for _ in range(_CALLS):
      fn(*fn_args)
    return {name: t.cpu() for name, t in tensors.items()}


def _samples_of(op):
  """op's float32 samples, those of 0-dim inputs last (XLA's index ops
  fail on them eagerly)."""
  return sorted(
      op.sample_inputs('cpu', torch.float32),
      key=lambda s: isinstance(s.input, torch.Tensor) and s.input.dim() == 0)


def _in_place_sample(op):
  """(sample, None, None) of the first sample whose `two` runs on CPU eager
  and keeps the shape of the views, or (None, None, why) if no sample does.
  """
  for sample in _samples_of(op):
    x = sample.input
    if not isinstance(x, torch.Tensor) or x.numel() == 0:
      continue
    try:
      tensors = _Case(op, 'two', sample).run('cpu')
    except Exception:
      continue
    if tensors['v0'].shape == x.shape and tensors['v1'].shape == x.shape:
      return sample, None, None
  return None, None, 'no non-empty sample keeps its shape and runs on CPU eager'


def _out_sample(op):
  """(sample, (shape, dtype) of its result, None) of the first sample whose
  `out` runs on CPU eager, or (None, None, why) if no sample does.
  """
  results = set()
  for sample in _samples_of(op):
    try:
      result = op.op(
          _clone(sample.input), *_clone(sample.args), **_clone(sample.kwargs))
    except Exception:
      continue
    if not isinstance(result, torch.Tensor):
      results.add(type(result).__name__)
      continue
    if result.numel() == 0:
      continue
    result = (result.shape, result.dtype)
    try:
      tensors = _Case(op, 'out', sample, result).run('cpu')
    except Exception:
      continue
    if tensors['view'].shape == result[0]:
      return sample, result, None
  if results:
    results = ', '.join(sorted(results))
    return None, None, f'the result is not one tensor: {results}'
  return None, None, 'no non-empty sample runs on CPU eager'


_samples = {}


def _case(op, mode):
  """The case of op in mode, or None and why the op cannot run in mode."""
  kind = 'out' if mode == 'out' else 'in_place'
  key = (op.name, op.variant_test_name, kind)
  if key not in _samples:
    _samples[key] = _out_sample(op) if kind == 'out' else _in_place_sample(op)
  sample, result, why = _samples[key]
  if sample is None:
    return None, why
  return _Case(op, mode, sample, result), None


def _marked_random(op):
  # op_db runs random ops under `wrapper_set_seed`.
  for fn in (op.op, op.inplace_variant):
    code = getattr(fn, '__code__', None)
    if code is not None and 'wrapper_set_seed' in code.co_names:
      return True
  return False


def _short(e, limit=160):
  text = re.sub(r'\s+', ' ', f'{type(e).__name__}: {e}').strip()
  return text if len(text) <= limit else text[:limit] + '...'


class DynamoViewOpsTest(unittest.TestCase):

  def setUp(self):
    super().setUp()
    torch._dynamo.reset()

  def tearDown(self):
    torch._dynamo.reset()
    super().tearDown()

  def assert_same(self, actual, expected, where, tolerances):
    for name, a in actual.items():
      torch.testing.assert_close(
          a,
          expected[name],
          **tolerances,
          equal_nan=True,
          msg=lambda m: f'{where}, {name}: {m}')

  def is_random(self, case, cpu, xla, device, tolerances):
    """Whether op_db marks case's op random, or its results change by seed."""
    if _marked_random(case.op):
      return True
    for on, results in (('cpu', cpu), (device, xla)):
      try:
        self.assert_same(case.run(on, seed=1), results, 'seed 1', tolerances)
      except Exception:
        return True
    return False

  def check(self, op, mode):
    case, why = _case(op, mode)
    name = f'{_op_name(op)} ({mode})'
    if case is None:
      self.skipTest(f'not applicable: {name}: {why}')
    tolerances = _OP_TOLERANCES.get(_op_name(op), _TOLERANCES)
    expected = case.run('cpu')
    device = torch_xla.device()
    try:
      eager = case.run(device)
    except Exception as e:
      self.skipTest(f'eager XLA: {name}: {_short(e)}')
    try:
      self.assert_same(eager, expected, 'eager XLA', tolerances)
    except AssertionError as e:
      if self.is_random(case, expected, eager, device, tolerances):
        self.skipTest(f'not applicable: {name}: random, and eager XLA differs '
                      'from CPU eager')
      self.skipTest(f'eager XLA: {name}: {_short(e)}')
    compile_fn = lambda fn: torch.compile(fn, backend='openxla')
    try:
      compiled = case.run(device, compile_fn, donate=mode == 'two_donated')
      self.assert_same(compiled, expected, 'compiled', tolerances)
    except Exception:
      # Not a failure of views if the op fails compiled on tensors of their
      # own too (`quantile` on torch_xla 2.9.0).
      torch._dynamo.reset()
      try:
        plain = case.run(device, compile_fn, plain=True)
        self.assert_same(plain, expected, 'compiled without views', tolerances)
      except Exception as e:
        self.skipTest(f'compiled XLA without views: {name}: {_short(e)}')
      raise


def _op_name(op):
  return op.name + ('.' + op.variant_test_name if op.variant_test_name else '')


def _test_name(op, mode):
  return f'test_{mode}_{re.sub(r"[^0-9A-Za-z_]", "_", _op_name(op))}'


def _add_tests():
  for op in op_db:
    if not _supports_float32(op):
      continue
    modes = []
    if op.inplace_variant is not None:
      modes.extend(_INPLACE_MODES)
    if op.supports_out:
      modes.append('out')
    for mode in modes:
      name = _test_name(op, mode)
      assert not hasattr(DynamoViewOpsTest, name), name
      setattr(
          DynamoViewOpsTest,
          name,
          lambda self, op=op, mode=mode: self.check(op, mode))


_add_tests()

if __name__ == '__main__':
  test = unittest.main(exit=False)
  sys.exit(0 if test.result.wasSuccessful() else 1)
