"""Compiled graphs hand out each output as the tensor it is.

The bridge's `Deduper` merged outputs by their XLA value
(`_unique_id_for_ir_and_data`), which is the same for `x.clone()` and the
update of `x` when the graph writes `x`, and for an input and its `detach()`:
outputs came back shifted (wrong values, or "doesn't match the broadcast
shape"), or the call failed. Every test compares the outputs and the inputs
with CPU eager after each of two calls, in inference and in grad mode.
"""
import sys
import unittest

from absl.testing import parameterized
import torch
import torch._dynamo
import torch_xla


def _inputs(device, grad):
  x = torch.arange(6, dtype=torch.float32).reshape(2, 3).to(device) / 4
  w = torch.full((3,), 1.5).to(device).requires_grad_(grad)
  return [x, w]


class OutputIdentityTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    torch._dynamo.reset()

  def assert_matches_eager(self, fn):
    for grad in (False, True):
      with self.subTest(grad=grad):
        torch._dynamo.reset()
        xla_args = _inputs(torch_xla.device(), grad)
        cpu_args = _inputs('cpu', grad)
        compiled = torch.compile(fn, backend='openxla')
        for call in range(2):
          with torch.set_grad_enabled(grad):
            xla_outs, cpu_outs = compiled(*xla_args), fn(*cpu_args)
          for i, (x, c) in enumerate(
              zip(list(xla_outs) + xla_args,
                  list(cpu_outs) + cpu_args)):
            torch.testing.assert_close(
                x.detach().cpu(),
                c.detach(),
                msg=lambda m: f'call {call}, tensor {i}: {m}')

  def test_outputs_that_need_no_computation(self):
    self.assert_matches_eager(lambda x, w: (x.detach(), x.view(-1)))
    self.assert_matches_eager(lambda x, w: (x.detach(), x * w))

  def test_clones_of_inputs(self):

    def fn(x, w):
      out = x.clone()
      return out.view(-1), out, x.detach()

    self.assert_matches_eager(fn)
    self.assert_matches_eager(lambda x, w: (x.clone(),))

  def test_clone_of_a_written_input(self):
    # `x.clone()` has the XLA value of `x`'s update: both are outputs of the
    # computation, and the other mutated input gets its own.
    def fn(x, w):
      with torch.no_grad():
        x.add_(1)
        w[1:].copy_(x[0, 1:] * -1)
      out = x.clone()
      return out * w, out

    self.assert_matches_eager(fn)

  def test_clone_of_an_activation_beside_a_loss(self):

    def fn(x, w):
      y = x * w
      return (y * y).mean(), y.clone()

    self.assert_matches_eager(fn)


if __name__ == '__main__':
  test = unittest.main()
  sys.exit(0 if test.result.wasSuccessful() else 1)
