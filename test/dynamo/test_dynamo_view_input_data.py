"""Compiled graphs read the current data of view inputs (pytorch/xla#8832).

A graph input that is a view of an eager tensor whose data changes between
calls, through the view itself, its base or another view of it, must be read
as it is at the call: every test compares with the same program run eagerly
on the CPU, call after call.
"""
import sys
import unittest

from absl.testing import parameterized
import torch
import torch._dynamo
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met


def _values(*shape):
  return torch.arange(
      torch.Size(shape).numel(), dtype=torch.float32).reshape(shape) / 4


class ViewInputDataTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    torch._dynamo.reset()

  def assert_calls_match_eager(self, fn, make, change, calls=4, sync=False):
    """`make(device)` returns (tensors, args); `change(tensors)` runs eagerly
    before each call; every output and tensor is compared after each call."""
    xla, xla_args = make(torch_xla.device())
    cpu, cpu_args = make('cpu')
    compiled = torch.compile(fn, backend='openxla')
    for call in range(calls):
      change(xla)
      change(cpu)
      if sync:
        torch_xla.sync()
      out = compiled(*[xla[n] for n in xla_args])
      expected = fn(*[cpu[n] for n in cpu_args])
      torch.testing.assert_close(
          out.cpu(), expected, msg=lambda m: f'call {call}: {m}')
      for name in cpu:
        torch.testing.assert_close(
            xla[name].cpu(),
            cpu[name],
            msg=lambda m: f'call {call}, {name}: {m}')
    torch_xla.sync()  # no tensor left reading a buffer given away

  @parameterized.parameters(False, True)
  def test_base_written_view_read_through_a_view_op(self, sync):
    # The graph's `view.view(2, 2)` used to read the base's buffer as it was
    # when the graph was compiled.
    def make(device):
      base = _values(8).to(device)
      return dict(base=base, view=base[:4]), ['view']

    self.assert_calls_match_eager(
        lambda v: v.view(2, 2) * 1,
        make,
        lambda t: t['base'].add_(1),
        sync=sync)

  @parameterized.parameters(False, True)
  def test_view_written_eagerly_between_calls(self, sync):
    # Without this fix: "buffer ... is deleted" at the third call.
    def make(device):
      base = _values(2, 4).to(device)
      key, value = base.unbind(0)
      return dict(base=base, key=key, value=value), ['key', 'value']

    self.assert_calls_match_eager(
        lambda k, v: k * 2 + v, make, lambda t: t['key'].mul_(2), sync=sync)

  def test_strided_view_flattened_in_the_graph(self):
    # Keys unbound from a (tokens, 2, heads, dim) tensor, written eagerly,
    # then flattened as vLLM's cache write does: the graph read stale keys.
    def make(device):
      kv = _values(1, 3, 2, 1, 2).to(device)
      key, value = kv.unbind(2)
      return dict(kv=kv, key=key), ['key']

    self.assert_calls_match_eager(lambda k: k.flatten(0, 2) + 0, make,
                                  lambda t: t['key'].mul_(2))

  def test_sibling_view_written_eagerly(self):

    def make(device):
      base = _values(2, 3).to(device)
      return dict(base=base, b=base[1]), ['b']

    self.assert_calls_match_eager(lambda b: b.t() * 1, make,
                                  lambda t: t['base'][1].add_(1))

  @parameterized.parameters(('t_',), ('unsqueeze_', 0),
                            ('as_strided_', (1, 2), (1, 1), 9))
  def test_base_changed_by_an_inplace_view_op(self, op, *args):
    # A tensor that an in-place view op made a view of its own buffer, but
    # not `_is_view()`: its first value was read at every call, then the
    # sync failed with "buffer ... is deleted" (`as_strided_` at the call).
    def make(device):
      base = _values(4, 4).to(device)
      getattr(base, op)(*args)
      return dict(base=base), ['base']

    self.assert_calls_match_eager(lambda b: b.flatten() * 2, make,
                                  lambda t: t['base'].add_(1))

  def test_one_execution_a_call(self):
    # A view whose data did not change costs nothing more.
    base = _values(8).to(torch_xla.device())
    view = base[:4]
    compiled = torch.compile(lambda v: v.view(2, 2) * 1, backend='openxla')
    compiled(view)
    torch_xla.sync()
    met.clear_all()
    for _ in range(3):
      compiled(view)
    xm.wait_device_ops()  # executions are counted when they finish
    self.assertEqual(met.metric_data('ExecuteTime')[0], 3)
    self.assertIsNone(met.counter_value('DynamoSyncInputExecuteTime'))


if __name__ == '__main__':
  test = unittest.main()
  sys.exit(0 if test.result.wasSuccessful() else 1)
