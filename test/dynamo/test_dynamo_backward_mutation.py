"""Inputs that a custom autograd.Function mutates in the forward and again in
the backward, against CPU eager.

`openxla` applies the forward's input mutations after its graph; AOTAutograd
returned the input's value after the backward's mutation for it, so the
input read the backward's value right after the forward (PyTorch's fix:
patches/pytorch, "Apply an input's forward mutation before its backward
one"; these tests are skipped on a torch without it).
"""
import sys
import unittest

import torch
import torch._dynamo
from torch._dynamo.backends.common import aot_autograd
import torch_xla


class Count(torch.autograd.Function):
  """Adds one to `t` in the forward and one in the backward."""

  @staticmethod
  def forward(ctx, a, t):
    t.add_(1)
    ctx.save_for_backward(t)
    return a * 2

  @staticmethod
  def backward(ctx, grad):
    (t,) = ctx.saved_tensors
    t.add_(1)
    return grad * 2, None


def _torch_applies_forward_mutations_first():
  torch_xla.device()  # before the autograd engine starts, for its XLA queue
  a, t = torch.ones(1, requires_grad=True), torch.zeros(1)
  torch.compile(
      Count.apply, backend=aot_autograd(fw_compiler=lambda g, _: g))(a, t)
  torch._dynamo.reset()
  return t.item() == 1


@unittest.skipUnless(_torch_applies_forward_mutations_first(),
                     'needs the PyTorch fix in patches/pytorch')
class BackwardMutationTest(unittest.TestCase):

  def setUp(self):
    super().setUp()
    torch._dynamo.reset()

  def assert_matches_eager(self, fn, make):
    """`fn(a, *make(device))` compiled on XLA: what it mutates after the
    forward and after the backward, and the gradient."""
    results = []
    for device in (torch_xla.device(), 'cpu'):  # XLA's autograd queue first
      a = torch.ones(3, device=device, requires_grad=True)
      tensors = make(device)
      f = torch.compile(fn, backend='openxla') if device != 'cpu' else fn
      for _ in range(2):
        out = f(a, *tensors)
        values = lambda: [t.cpu().clone() for t in tensors]
        after_forward = values()
        out.sum().backward()
        results.append([*after_forward, *values(), a.grad.cpu().clone()])
    half = len(results) // 2
    for xla, cpu in zip(results[:half], results[half:]):
      for got, expected in zip(xla, cpu):
        torch.testing.assert_close(got, expected)

  def test_plain_tensor(self):
    self.assert_matches_eager(Count.apply,
                              lambda device: [torch.zeros(3, device=device)])

  def test_views_of_one_buffer(self):

    def fn(a, t0, t1):  # views share a version counter: t1 only read
      return Count.apply(a, t0) * t1.sum()

    def make(device):
      buf = torch.zeros(2, 3, device=device)
      return [buf, *buf.unbind(0)]

    self.assert_matches_eager(lambda a, buf, t0, t1: fn(a, t0, t1), make)


if __name__ == '__main__':
  test = unittest.main()
  sys.exit(0 if test.result.wasSuccessful() else 1)
