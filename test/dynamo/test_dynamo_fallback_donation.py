"""Donated inputs of graphs that XLA runs in parts around ops it runs on the
CPU, against CPU eager.

The bridge compiles each part of such a graph on its own, and each part
donated the buffers of its inputs marked with `dynamo_set_buffer_donor_`:
the first part that read a donated input deleted its buffer, and the next
part that read it failed ("Trying to access XLA data for tensor with ID 1
while an async operation is in flight"; with the donation marked in the
graph, "Executable expected parameter 0 of size 4 but got buffer with
incompatible size 20"). With views of one base lifted, the parts read the
base each ("Check failed: !buffer->IsDeleted()").
"""
import sys
import unittest

import torch
import torch._dynamo
import torch_xla
import torch_xla.debug.metrics as met


class FallbackDonationTest(unittest.TestCase):

  def setUp(self):
    super().setUp()
    torch._dynamo.reset()
    met.clear_all()

  def assert_calls_match_eager(self, fn, *cpu_args):
    """`fn` compiled, its first argument donated before each call."""
    compiled = torch.compile(fn, backend='openxla')
    xla_args = [a.to(torch_xla.device()) for a in cpu_args]
    for _ in range(2):
      expected = fn(*cpu_args)
      torch.ops.xla.dynamo_set_buffer_donor_(xla_args[0], True)
      got = compiled(*xla_args)
      torch.testing.assert_close(got.cpu(), expected)
    for cpu, xla in zip(cpu_args, xla_args):
      torch.testing.assert_close(xla.cpu(), cpu)

  def test_donated_input_read_by_two_parts(self):

    def fn(x, other):
      y = (x * 2).copysign(other)  # XLA runs `copysign` on the CPU
      x.add_(y)
      return y

    self.assert_calls_match_eager(fn, torch.randn(5), torch.randn(5))
    self.assertIn('aten::copysign.Tensor', met.counter_names())
    self.assertEqual(met.counter_value('DynamoFallbackDonationDropped'), 1)

  def test_donated_input_read_by_one_part(self):

    def fn(x, other):
      x.mul_(2)
      return x.copysign(other)

    self.assert_calls_match_eager(fn, torch.randn(5), torch.randn(5))
    self.assertIn('aten::copysign.Tensor', met.counter_names())
    self.assertIsNone(met.counter_value('DynamoFallbackDonationDropped'))

  def test_cpu_inputs_read_by_two_parts(self):
    # The bridge splits a graph of CPU tensors too; they have no donation.
    fn = lambda x, other: (x * 2).copysign(other) + x
    x, other = torch.randn(5), torch.randn(5)
    compiled = torch.compile(fn, backend='openxla')
    torch.testing.assert_close(compiled(x, other), fn(x, other))

  def test_input_donated_in_the_graph_read_by_two_parts(self):
    # The parts read the input where the graph uses the donation op's result.

    def fn(x, other):
      torch.ops.xla.dynamo_set_buffer_donor_(x, True)
      y = (x * 2).copysign(other)
      x.add_(y)
      return y

    x, other = torch.randn(5), torch.randn(5)
    xla_x, xla_other = x.to(torch_xla.device()), other.to(torch_xla.device())
    compiled = torch.compile(fn, backend='openxla')
    for _ in range(2):
      expected = (x * 2).copysign(other)
      x.add_(expected)
      torch.testing.assert_close(compiled(xla_x, xla_other).cpu(), expected)
    torch.testing.assert_close(xla_x.cpu(), x)
    self.assertEqual(met.counter_value('DynamoFallbackDonationDropped'), 1)


class FallbackDonationOfViewsTest(unittest.TestCase):
  """Both views of `base.unbind(0)` written by an op that XLA runs on the
  CPU, or through a dtype view (no lowering of `view.dtype`), in a graph
  that donates one or both of them: the graph donates their lifted base."""

  def setUp(self):
    super().setUp()
    torch._dynamo.reset()

  def assert_calls_match_eager(self, fn, base, *others):
    compiled = torch.compile(fn, backend='openxla')
    device = torch_xla.device()
    xla_base = base.to(device)
    xla_views, views = xla_base.unbind(0), base.unbind(0)
    xla_others = [o.to(device) for o in others]
    for _ in range(2):
      compiled(*xla_views, *xla_others, donate=True)
      fn(*views, *others, donate=False)
    for got, expected in zip((xla_base, *xla_views), (base, *views)):
      torch.testing.assert_close(got.cpu().view(torch.int16),
                                 expected.view(torch.int16))

  def test_op_run_on_the_cpu_writes_both_views(self):
    for donors in (1, 2):

      def fn(v0, v1, other, donate):
        if donate:
          for view in (v0, v1)[:donors]:
            torch.ops.xla.dynamo_set_buffer_donor_(view, True)
        v0.copysign_(other)
        v1.copysign_(other)

      torch._dynamo.reset()
      self.assert_calls_match_eager(fn, torch.randn(2, 5, dtype=torch.half),
                                    torch.randn(5, dtype=torch.half))

  def test_dtype_views_of_both_views_written(self):

    def fn(kc, vc, k, v, slots, donate):
      if donate:
        torch.ops.xla.dynamo_set_buffer_donor_(kc, True)
        torch.ops.xla.dynamo_set_buffer_donor_(vc, True)
      kc.view(torch.int16).index_copy_(0, slots, k)
      vc.view(torch.int16).index_copy_(0, slots, v)

    bits = lambda: torch.randint(0x3C00, 0x4000, (2, 4), dtype=torch.int16)
    self.assert_calls_match_eager(fn, torch.zeros(2, 6, 4, dtype=torch.half),
                                  bits(), bits(), torch.tensor([1, 4]))


if __name__ == '__main__':
  test = unittest.main()
  sys.exit(0 if test.result.wasSuccessful() else 1)
