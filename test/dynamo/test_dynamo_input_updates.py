"""Inputs that tracing updates in place get the update, under dynamic shapes.

Tracing a graph on XLA tensors can update an input in place (`aten.copy`
over the whole input does). The bridge copies the update back into that
input; it indexed the call's arguments with the input's position among the
tensors, so a graph with SymInt inputs before its tensors (dynamic=True) had
the update copied into another tensor, or failed (`'int' object has no
attribute 'copy_'`). And `aten.copy` over an input in a graph neither
writes the input while tracing nor loses the copy (`CopiesTest`).
"""
import sys
import unittest

import torch
import torch._dynamo
import torch_xla


class InputUpdatesTest(unittest.TestCase):

  def setUp(self):
    super().setUp()
    torch._dynamo.reset()

  def assert_matches_eager(self, fn, view=lambda base: ()):
    """`fn(*view(base), base, tok)` compiled with dynamic=True, for 3 sizes."""
    compiled = torch.compile(fn, backend='openxla', dynamic=True)
    for n in (2, 3, 5):
      cpu = [torch.arange(2. * n).view(n, 2), torch.ones(n, 2)]
      xla = [t.to(torch_xla.device()) for t in cpu]
      compiled(*view(xla[0]), *xla)
      fn(*view(cpu[0]), *cpu)
      for x, c in zip(xla, cpu):
        torch.testing.assert_close(x.cpu(), c, msg=lambda m: f'n={n}: {m}')

  def test_whole_input_copied(self):

    def fn(base, tok):
      base.copy_(tok - 1)
      base[0, 1] = 1.5

    self.assert_matches_eager(fn)

  def test_lifted_base_set_through_a_symbolic_slice(self):
    # `view` and `base` are lifted to one input, after the graph's SymInts.
    def fn(view, base, tok):
      base[base.shape[0] - tok.shape[0]:] = tok - 1
      view.fill_(1.5)

    self.assert_matches_eager(fn, view=lambda base: (base[:, 1][0],))


class CopiesTest(unittest.TestCase):
  """`aten.copy` in a graph. XLA's kernel writes its first argument, so
  tracing wrote the input copied over (a dtype view of it then read the other
  input at each later call), and its result, the other input's data, is not
  an output XLA computes (IndexError in the bridge)."""

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


if __name__ == '__main__':
  test = unittest.main()
  sys.exit(0 if test.result.wasSuccessful() else 1)
