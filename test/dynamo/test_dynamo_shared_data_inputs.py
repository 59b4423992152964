"""A graph input that shares its data with a tensor made before it.

An input updated in place and saved for the backward (`x.add_(1)` under
no_grad, then `x @ w`) reaches the backward graph as a tensor that shares
its data with the input; that data records the id of the tensor that made
it, not the argument's, so the bridge kept it as a constant of the backward
graph: from the second call on, the gradients were those of the first
call's input, and a donated input failed ('... while an async operation is
in flight').
"""
import sys
import unittest

from absl.testing import parameterized
import torch
import torch._dynamo
import torch_xla


class SharedDataInputsTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    torch._dynamo.reset()

  @parameterized.parameters(False, True)
  def test_input_updated_in_place_and_saved_for_backward(self, donate):

    def fn(x, w):
      if donate:
        torch.ops.xla.dynamo_set_buffer_donor_(x, True)
      with torch.no_grad():
        x.add_(1)
      return (x @ w).sum()

    x_cpu = torch.randn(4, 4)
    w_cpu = torch.randn(4, 4, requires_grad=True)
    x = x_cpu.to(torch_xla.device())
    w = w_cpu.detach().to(torch_xla.device()).requires_grad_()
    compiled = torch.compile(fn, backend='openxla')
    for step in range(3):
      compiled(x, w).backward()
      torch_xla.sync()
      fn(x_cpu, w_cpu).backward()
      message = lambda m: f'call {step}: {m}'
      torch.testing.assert_close(x.cpu(), x_cpu, msg=message)
      torch.testing.assert_close(w.grad.cpu(), w_cpu.grad, msg=message)


if __name__ == '__main__':
  test = unittest.main()
  sys.exit(0 if test.result.wasSuccessful() else 1)
