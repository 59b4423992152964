"""Training steps over parameters, optimizer state and gradients kept as views
of one flat buffer (FSDP-, ZeRO- and DDP-style), compiled with `openxla`,
against CPU eager. Without view lifting they fail: the views are written in
one graph.
"""
import sys
import unittest

from absl.testing import absltest, parameterized
import torch
import torch._dynamo
import torch_xla


def _views(flat):
  """A (2, 3) weight and a bias of 4 on `flat`'s first 10 elements."""
  return [flat[:6].view(2, 3), flat[6:10]]


class FlatParametersTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    torch._dynamo.reset()

  def assert_steps_match_eager(self, make, step, steps=3):
    """`make(device)` gives the tensors; `step(tensors, i)` is one training
    step, compiled on XLA. Every tensor is compared after every step."""
    devices = (torch_xla.device(), 'cpu')
    tensors = {device: make(device) for device in devices}
    compiled = torch.compile(step, backend='openxla')
    for i in range(steps):
      compiled(tensors[devices[0]], i)
      step(tensors['cpu'], i)
      for got, expected in zip(tensors[devices[0]], tensors['cpu']):
        torch.testing.assert_close(
            got.detach().cpu(), expected.detach(), msg=lambda m: f'{i}: {m}')

  @parameterized.parameters(
      (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),),
      (lambda ps: torch.optim.Adam(ps, lr=0.1, foreach=True),),
      (lambda ps: torch.optim.AdamW(ps, lr=0.1, foreach=False),),
  )
  def test_optimizer_step_over_views_of_one_buffer(self, optimizer):
    opts = {}

    def make(device):
      flat = torch.linspace(-1, 1, 12, device=device)
      params = [p.requires_grad_() for p in _views(flat)]
      opts[flat.device.type] = optimizer(params)
      return [flat, *params]

    def step(tensors, i):
      for p in tensors[1:]:
        p.grad = torch.full_like(p, i + 1.0).cos()
      opts[tensors[0].device.type].step()

    self.assert_steps_match_eager(make, step)

  def test_ema_of_views_of_one_buffer(self):

    def make(device):
      flat = torch.linspace(-1, 1, 24, device=device).view(2, 12)
      return [flat, *_views(flat[0]), *_views(flat[1])]

    def step(tensors, i):
      params, ema = tensors[1:3], tensors[3:5]
      torch._foreach_add_(params, [p.sin() for p in params])
      torch._foreach_mul_(ema, 0.9)
      torch._foreach_add_(ema, params, alpha=0.1)

    self.assert_steps_match_eager(make, step)

  def test_gradient_bucket_views_written_and_donated(self):

    def make(device):
      bucket = torch.zeros(10, device=device)
      weights = [
          w.requires_grad_() for w in _views(torch.ones(10, device=device))
      ]
      return [bucket, *_views(bucket), *weights]

    def step(tensors, i):
      bucket, grads, weights = tensors[0], tensors[1:3], tensors[3:5]
      for g, w in zip(grads, weights):
        if g.device.type == 'xla':
          torch.ops.xla.dynamo_set_buffer_donor_(g, True)
        g.copy_((w * (i + 1)).detach())
      bucket.div_(2)  # an all-reduce's average over two replicas

    self.assert_steps_match_eager(make, step)

  def test_transposed_views_written_in_place(self):

    def make(device):
      flat = torch.linspace(-1, 1, 12, device=device)
      return [flat, flat[:6].view(2, 3).t(), flat[6:].view(3, 2)]

    def step(tensors, i):
      tensors[1].add_(tensors[2] * (i + 1))
      tensors[2].mul_(0.5)

    self.assert_steps_match_eager(make, step)


if __name__ == '__main__':
  absltest.main()
