"""Graphs that copy over an input (`aten.copy`), against CPU eager.

XLA's `aten.copy` kernel is its `copy_`: the bridge, running the graph to
trace it, wrote the input copied over. A dtype view copied over then read
the source's data at every later call; a view of part of a tensor made
under `torch.inference_mode()` was left on a buffer the next sync deleted
(the process died); and the copy itself, the source's data as it is, is
not an output XLA computes (IndexError in the bridge). Neither is the
result of `dynamo_set_buffer_donor_` (`DonationTest`).
"""
import itertools
import sys
import unittest

import torch
import torch._dynamo
import torch_xla


class CopiesTest(unittest.TestCase):

  def setUp(self):
    super().setUp()
    torch._dynamo.reset()

  def assert_calls_match_eager(self, fn, view=lambda base: base):
    """`fn(view(base), src)` compiled, called with a new `src` each time."""
    compiled = torch.compile(fn, backend='openxla')
    cpu = torch.arange(6.).view(2, 3)
    xla = cpu.to(torch_xla.device())
    for step in range(3):
      src = torch.arange(6, dtype=view(cpu).dtype).view(2, 3) * (step + 2)
      out = compiled(view(xla), src.to(torch_xla.device()))
      expected = fn(view(cpu), src)
      for x, c in zip([xla, *out], [cpu, *expected]):
        torch.testing.assert_close(x.cpu(), c, msg=lambda m: f'{step}: {m}')

  def test_dtype_view_copied_over_and_written(self):

    def fn(view, src):
      view.copy_(src)
      view.bitwise_xor_(-2**31)
      return ()

    self.assert_calls_match_eager(fn, lambda base: base.view(torch.int32))

  def test_input_copied_over_after_a_read(self):

    def fn(dst, src):
      old = dst * 2
      dst.copy_(src)
      return old,

    self.assert_calls_match_eager(fn)

  def test_copy_of_an_input_returned(self):

    def fn(dst, src):
      return torch.empty_like(dst).copy_(src), dst * 2

    self.assert_calls_match_eager(fn)

  def test_views_made_under_inference_mode_copied_over(self):
    # Before any other write, or after one; views of all of a tensor or of
    # part of it (without this fix the process dies at the first of those).
    def copy(v, x):
      v.copy_(x * -1)

    def write_then_copy(v, x):
      v.add_(x)
      v.copy_(x * -1)

    views = [
        lambda b: b.t(), lambda b: b.view(20), lambda b: b.narrow(0, 1, 2),
        lambda b: b[1], lambda b: b.diagonal(), lambda b: b.unbind(0)[2],
        lambda b: b.split(2)[1]
    ]
    for fn, view in itertools.product((copy, write_then_copy), views):
      torch._dynamo.reset()
      results = []
      for device in ('cpu', torch_xla.device()):
        with torch.inference_mode():
          base = torch.arange(20.).view(4, 5).to(device)
          v = view(base)
          f = torch.compile(fn, backend='openxla') if device != 'cpu' else fn
          for step in range(2):
            f(v, torch.full(v.shape, step + 1., device=device))
          results.append((base.cpu(), v.cpu()))
      for x, c in zip(*results):
        torch.testing.assert_close(x, c, rtol=0, atol=0)


class DonationTest(unittest.TestCase):
  """XLA has no lowering of `view.dtype`, so the bridge splits a graph that
  writes a dtype view around it, and the part left to XLA returns the
  donation op's result: the input's data as it is, which XLA does not
  compute ("Failed to get computation by hash" at the call)."""

  def test_dtype_view_written_in_a_donating_graph(self):

    def zero(cache):
      torch.ops.xla.dynamo_set_buffer_donor_(cache, True)
      cache.view(torch.int32).zero_()

    def bits(cache):
      torch.ops.xla.dynamo_set_buffer_donor_(cache, True)
      cache.view(torch.int32).bitwise_xor_(-2**31)

    for fn, sync in itertools.product((zero, bits), (False, True)):
      torch._dynamo.reset()
      compiled = torch.compile(fn, backend='openxla')
      cpu = torch.arange(6.)
      xla = cpu.to(torch_xla.device())
      for step in range(2):
        compiled(xla)
        fn(cpu)
        if sync:
          torch.testing.assert_close(xla.cpu(), cpu, msg=lambda m: f'{m}')
      torch.testing.assert_close(xla.cpu(), cpu)


if __name__ == '__main__':
  test = unittest.main()
  sys.exit(0 if test.result.wasSuccessful() else 1)
