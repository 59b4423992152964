"""Inputs that tracing updates in place get the update, under dynamic shapes.

Tracing a graph on XLA tensors can update an input in place (`aten.copy`
over the whole input does). The bridge copies the update back into that
input; it indexed the call's arguments with the input's position among the
tensors, so a graph with SymInt inputs before its tensors (dynamic=True) had
the update copied into another tensor, or failed (`'int' object has no
attribute 'copy_'`).
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


if __name__ == '__main__':
  test = unittest.main()
  sys.exit(0 if test.result.wasSuccessful() else 1)
