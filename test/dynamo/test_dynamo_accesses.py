"""What a Dynamo graph does to its inputs, from one run on fake tensors
(torch_xla/_dynamo/accesses.py)."""
import dataclasses
import sys
import unittest

import torch
import torch._dynamo
import torch_xla
from torch_xla._dynamo.accesses import AccessFinder


def _accesses(fn, *args, dynamic=False):
  """The `Accesses` of the graph Dynamo captures from `fn(*args)`, found in
  Dynamo's context, with positions in `args` (not in the graph's inputs), and
  the number of guards the fake run added."""
  found = []

  def backend(module, example_inputs):
    shape_env = torch._guards.TracingContext.get().fake_mode.shape_env
    guards = len(shape_env.guards)
    accesses = AccessFinder(module, example_inputs).accesses()
    in_args = {id(a): j for j, a in enumerate(args)}
    to_args = lambda inputs: {in_args[id(example_inputs[i])] for i in inputs}
    found.append(
        dataclasses.replace(
            accesses,
            written=to_args(accesses.written),
            donated=to_args(accesses.donated)))
    found.append(len(shape_env.guards) - guards)
    return module.forward

  torch._dynamo.reset()
  torch.compile(fn, backend=backend, fullgraph=True, dynamic=dynamic)(*args)
  return found


class AccessFinderTest(unittest.TestCase):

  def tensors(self, n, *shape):
    return [torch.zeros(*shape, device=torch_xla.device()) for _ in range(n)]

  def test_read_only_graph(self):
    accesses, _ = _accesses(lambda a, b: a @ b, *self.tensors(2, 3, 3))
    self.assertEqual(accesses.touched, frozenset())

  def test_write_through_a_view_of_an_input(self):

    def fn(a, b):
      a[1:].transpose(0, 1).add_(b[0, :2])
      return b * 2

    accesses, _ = _accesses(fn, *self.tensors(2, 3, 3))
    self.assertEqual(accesses.written, {0})
    self.assertEqual(accesses.donated, frozenset())

  def test_index_copy_and_out_arguments(self):

    def fn(cache, rows, idx, out):
      cache.index_copy_(0, idx, rows)
      torch.mul(rows, 2, out=out)

    cache, rows, out = self.tensors(3, 4, 2)
    idx = torch.arange(4, device=torch_xla.device())
    accesses, _ = _accesses(fn, cache, rows, idx, out)
    self.assertEqual(accesses.written, {0, 3})

  def test_foreach_ops_write_their_inputs(self):
    # A fake foreach op bumps no version counter.
    def fn(a, b, c):
      torch._foreach_add_([a, b], 1.0)
      return c * 2

    accesses, _ = _accesses(fn, *self.tensors(3, 2, 3))
    self.assertEqual(accesses.written, {0, 1})

  def test_writes_a_schema_hides(self):
    # `native_batch_norm`'s schema does not mark the running statistics it
    # writes (`Tensor? running_mean`); AOTAutograd's decomposition of it,
    # `_native_batch_norm_legit`, does.
    def fn(x, mean, var):
      return torch.nn.functional.batch_norm(x, mean, var, training=True)

    x, = self.tensors(1, 8, 3)
    accesses, _ = _accesses(fn, x, *self.tensors(2, 3))
    self.assertEqual(accesses.written, {1, 2})

  def test_inputs_are_not_aliased_in_the_fake_run(self):
    # Views of one tensor are told apart by position: only the one written.
    base = self.tensors(1, 2, 4)[0]
    accesses, _ = _accesses(lambda k, v: k.add_(v), base[0], base[1])
    self.assertEqual(accesses.written, {0})

  def test_donated_inputs_and_views_of_them(self):

    def fn(a, b, c):
      torch.ops.xla.dynamo_set_buffer_donor_(a[0], True)
      torch.ops.xla.dynamo_set_buffer_donor_(b, False)
      return a + b + c

    accesses, _ = _accesses(fn, *self.tensors(3, 2, 2))
    self.assertEqual(accesses.donated, {0})
    self.assertEqual(accesses.written, frozenset())
    self.assertEqual(accesses.touched, {0})

  def test_symbolic_sizes_get_no_guard(self):

    def fn(buf, x):
      buf.narrow(0, 0, x.shape[0]).add_(x.view(x.shape[0], -1).sum(1))
      return (x * 2).view(-1, 2)

    buf, x = self.tensors(1, 16)[0], self.tensors(1, 4, 2)[0]
    accesses, guards = _accesses(fn, buf, x, dynamic=True)
    self.assertEqual(accesses.written, {0})
    self.assertEqual(guards, 0)


if __name__ == '__main__':
  test = unittest.main()
  sys.exit(0 if test.result.wasSuccessful() else 1)
