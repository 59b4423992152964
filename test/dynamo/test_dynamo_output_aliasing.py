"""torch.compile(backend='openxla') keeps eager's aliasing between outputs.

Every test runs the same program compiled on XLA and eagerly on the CPU,
writes into one output in place and compares every output and input, after
the first and after a second call, in inference and in grad mode. See
[Note: Outputs that alias one another] in torch_xla/_dynamo/output_aliases.py.
"""
import sys
import unittest

from absl.testing import parameterized
import torch
import torch._dynamo
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from torch_xla._dynamo import config as dynamo_config


def _inputs(device, grad):
  x = torch.arange(6, dtype=torch.float32).reshape(2, 3).to(device) / 4
  w = torch.full((3,), 1.5).to(device).requires_grad_(grad)
  return [x, w]


class OutputAliasingTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    torch._dynamo.reset()

  def assert_matches_eager(self, fn, write=0, inputs=_inputs):
    """Runs `fn` compiled on XLA and eagerly on the CPU, in both grad modes.

    After each of two calls, `output[write]` is written in place, then every
    output and input is compared.
    """
    for grad in (False, True):
      with self.subTest(grad=grad):
        torch._dynamo.reset()
        xla_args, cpu_args = inputs(torch_xla.device(),
                                    grad), inputs('cpu', grad)
        compiled = torch.compile(fn, backend='openxla')
        for call in range(2):
          with torch.set_grad_enabled(grad):
            xla_outs, cpu_outs = compiled(*xla_args), fn(*cpu_args)
          with torch.no_grad():
            xla_outs[write].add_(100)
            cpu_outs[write].add_(100)
          for i, (x, c) in enumerate(
              zip(list(xla_outs) + xla_args,
                  list(cpu_outs) + cpu_args)):
            torch.testing.assert_close(
                x.detach().cpu(),
                c.detach(),
                msg=lambda m: f'call {call}, tensor {i}: {m}')
            self.assertEqual(x.requires_grad, c.requires_grad)

  def test_view_and_its_base(self):

    def fn(x, w):
      out = x.mul(w)
      return out.view(-1), out

    self.assert_matches_eager(fn, write=0)
    self.assert_matches_eager(fn, write=1)

  def test_unbind_and_its_base(self):

    def fn(x, w):
      out = x.mul(w)
      return (*out.unbind(0), out)

    self.assert_matches_eager(fn, write=2)

  def test_unbind_of_a_square_intermediate(self):
    # XLA's as_strided reads the (1,) strides of a row of a (2, 2) tensor as a
    # column's: each row is rebuilt from the flattened intermediate.
    def fn(x, w):
      out = x[:, :2] * w[:2]
      return (*out.unbind(0), out)

    self.assert_matches_eager(fn, write=2)

  def test_split_and_its_base(self):

    def fn(x, w):
      out = x.mul(w)
      return (*out.split(1), out)

    self.assert_matches_eager(fn, write=2)

  def test_transpose_of_an_intermediate(self):

    def fn(x, w):
      out = x.mul(w)
      return out.t(), out

    self.assert_matches_eager(fn, write=0)

  def test_views_of_a_transposed_intermediate(self):
    # `x.t() + 1` keeps the strides of `x.t()`, but XLA's tensor is row-major.
    def unbind(x, w):
      return (x.t() + w[:2]).unbind(0)

    def row(x, w):
      y = x.t() * 2
      return y, y[0]

    self.assert_matches_eager(unbind, write=0)
    self.assert_matches_eager(row, write=0)
    self.assert_matches_eager(row, write=1)

  def test_split_of_an_intermediate_along_its_last_dim(self):
    # XLA's as_strided_scatter writes a view that is not dense, as a (2, 3)
    # chunk of a (2, 12) tensor is, as if it were.
    def inputs(device, grad):
      return [torch.arange(24.).reshape(2, 12).to(device).requires_grad_(grad)]

    def fn(a):
      t = torch.split(a, 3, -1)
      return t[0], t[1], t[2], t[3]

    self.assert_matches_eager(fn, write=0, inputs=inputs)
    self.assert_matches_eager(lambda a: fn(a + 1), write=0, inputs=inputs)

  def test_views_without_their_base(self):

    def fn(x, w):
      out = x.mul(w)
      return out[0], out.view(3, 2)[1:], out.view(-1)

    self.assert_matches_eager(fn, write=2)

  def test_intermediate_returned_twice(self):

    def fn(x, w):
      out = x.mul(w)
      return out, out

    self.assert_matches_eager(fn, write=0)

  def test_views_of_inputs_and_of_intermediates(self):

    def fn(x, w):
      out = x.mul(w)
      return x.view(-1), out.view(-1), out, x[0], out[1]

    self.assert_matches_eager(fn, write=1)
    self.assert_matches_eager(fn, write=0)

  @parameterized.parameters('unbind', 'split')
  def test_unbind_of_an_input_that_requires_grad(self, op):
    # AOTAutograd hides from autograd that these alias their input (Note:
    # "differentiable outputs that alias each other from a multi-output view
    # call"); on XLA they came back in buffers of their own.
    def inputs(device, grad):
      x = torch.arange(6.).reshape(2, 3).to(device).requires_grad_(grad)
      return [x * 1, torch.ones(3).to(device)]

    def fn(x, w):
      return (x * w).sum(), *getattr(x, op)(1)

    self.assert_matches_eager(fn, write=1, inputs=inputs)

  def test_views_of_inputs_that_share_a_base(self):
    # XLA's views report offset 0, so the fakes of two views of one base
    # overlap: a view of one is rebuilt from the input it views.
    def inputs(device, grad):
      p = torch.arange(8.).reshape(2, 4).to(device).requires_grad_(grad)
      return [p.unbind(1)[1], p.narrow(0, 0, 2), torch.ones(2).to(device)]

    def fn(h0, h1, w):
      return (h0 * w).sum() + h1.sum(), h0[0]

    def fn_other_order(h1, h0, w):
      return (h0 * w).sum() + h1.sum(), h0[0], h0[1]

    def rows(device, grad):
      p = torch.arange(8.).reshape(2, 4).to(device).requires_grad_(grad)
      return [*p.unbind(0), torch.ones(4).to(device)]

    def fn_both(r0, r1, w):
      return (r0 * w).sum() + (r1 * w).sum(), r0[1], r1[2], r0[3]

    self.assert_matches_eager(fn, write=0, inputs=inputs)
    self.assert_matches_eager(
        fn_other_order,
        write=0,
        inputs=lambda *a: [inputs(*a)[i] for i in (1, 0, 2)])
    self.assert_matches_eager(fn_both, write=0, inputs=rows)

  def test_torch_func_grad_in_the_graph(self):
    # torch.func's wrapped tensors in the graph have no storage.
    def fn(x, w):
      g = torch.func.grad(lambda t: (t.sin() * w).sum())(x)
      return g, g[0]

    self.assert_matches_eager(fn, write=0)

  def test_two_intermediates(self):

    def fn(x, w):
      a = x.mul(w)
      b = x.add(w)
      return a.t(), b[0], a, b

    self.assert_matches_eager(fn, write=2)
    self.assert_matches_eager(fn, write=1)

  def test_view_written_in_the_graph(self):

    def fn(x, w):
      out = x.mul(w)
      v = out.view(-1)
      v.add_(1)
      return v, out, v.mul_(2)

    self.assert_matches_eager(fn, write=1)

  def test_detached_view_of_an_intermediate(self):

    def fn(x, w):
      out = x.mul(w)
      return out.detach().view(-1), out

    self.assert_matches_eager(fn, write=0)

  def test_in_place_view_ops_on_an_intermediate(self):

    def fn(x, w):
      out = x.mul(w)
      out.t_()
      d = out.detach()
      out.unsqueeze_(0)
      return d[0], out

    self.assert_matches_eager(fn, write=0)

  def test_in_place_view_ops_on_inputs(self):
    # Dynamo keeps them in the graph (no graph break) and AOTAutograd replays
    # them on the inputs after the call.
    def fn(x, w):
      x.t_()
      w.unsqueeze_(0)
      return x * 2, w + 1

    self.assertEqual(
        torch._dynamo.explain(fn)(*_inputs('cpu', False)).graph_break_count, 0)
    results = []
    for device in ('cpu', torch_xla.device()):
      x, w = _inputs(device, False)
      f = fn if device == 'cpu' else torch.compile(fn, backend='openxla')
      results.append([t.cpu() for t in (*f(x, w), x, w)])
    for xla, cpu in zip(*reversed(results)):
      self.assertEqual(xla.shape, cpu.shape)
      torch.testing.assert_close(xla, cpu)

  def test_set__on_an_intermediate(self):
    # PyTorch's test_set__steals_view_chain: `set_` is tagged an in-place view
    # op, but it has no view op (`set`) to be traced as.
    def inputs(device, grad):
      return [
          torch.arange(9.).reshape(3, 3).to(device),
          torch.arange(36.).reshape(4, 3, 3).to(device)
      ]

    def fn(a, b):
      a_ = a.mul(2)
      b_ = b.mul(2)
      b_slice = b_[1].view(3, 3)
      a_.set_(b_slice)
      a_.view(-1).mul_(2)
      return a_ * b_slice, b_

    self.assert_matches_eager(fn, write=0, inputs=inputs)

  def test_outputs_that_need_no_computation(self):

    def fn(x, w):
      return x.detach(), x.view(-1)

    def fn2(x, w):
      return x.detach(), x * w

    self.assert_matches_eager(fn, write=1)
    self.assert_matches_eager(fn2, write=1)

  def test_clones_of_inputs_are_not_aliases(self):
    # XLA's clone keeps its input's value: only aliases of an input (detach)
    # come back as the input's data.
    def fn(x, w):
      out = x.clone()
      return out.view(-1), out, x.detach()

    self.assert_matches_eager(fn, write=1)
    self.assert_matches_eager(lambda x, w: (x.clone(),), write=0)

  def test_donated_inputs(self):
    # A donated input that the graph writes: the outputs alias as in eager.
    def written(x, w):
      torch.ops.xla.dynamo_set_buffer_donor_(x, True)
      with torch.no_grad():
        x.mul_(2)
      out = x * w
      return out.view(-1), out

    self.assert_matches_eager(written, write=0)

  def test_donated_input_not_written_keeps_default_outputs(self):
    # XLA may give the buffer of a donated input that the graph does not write
    # to an output of its shape: such a graph keeps the default path's
    # outputs, and `x`, which none of them has the shape of, stays readable.
    def fn(x):
      torch.ops.xla.dynamo_set_buffer_donor_(x, True)
      out = x + 1
      return (*out.unbind(0), *out.split(1))

    x = _inputs(torch_xla.device(), False)[0]
    compiled = torch.compile(fn, backend='openxla')
    for _ in range(2):
      outs = compiled(x)
      expected = fn(x.cpu())
      for got, want in zip(list(outs) + [x], list(expected) + [x.cpu()]):
        torch.testing.assert_close(got.cpu(), want)

  def test_symbolic_shapes(self):
    # Outputs of symbolic layout alias as in eager for every size: their
    # layouts are evaluated for the sizes of each call.
    def fn(x):
      out = x * 2
      return out.view(-1), out, out[1:].t()

    def matmul(x, w):
      out = (x @ w).mul(2)
      return out, out.view(-1), *out.split(1), out[0]

    compiled = torch.compile(fn, backend='openxla', dynamic=True)
    for n in (2, 3, 5):
      x = torch.arange(4. * n).reshape(n, 4)
      got, want = compiled(x.to(torch_xla.device())), fn(x)
      got[1].add_(100)
      want[1].add_(100)
      for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w)
    x, w = _inputs('cpu', False)
    compiled = torch.compile(matmul, backend='openxla', dynamic=True)
    for x in (x.t(), torch.ones(5, 2)):
      got = compiled(
          x.to(torch_xla.device()), w[:2, None].to(torch_xla.device()))
      want = matmul(x, w[:2, None])
      got[0].add_(100)
      want[0].add_(100)
      for g, w2 in zip(got, want):
        torch.testing.assert_close(g.cpu(), w2)

  def test_clone_of_a_written_input(self):
    # `x.clone()` has the XLA value of `x`'s update: both are outputs of the
    # computation, and the other mutated input gets its own.
    def fn(x, w):
      with torch.no_grad():
        x.add_(1)
        w[1:].copy_(x[0, 1:] * -1)
      out = x.clone()
      return out * w, out

    self.assert_matches_eager(fn, write=1)

  def test_clone_of_an_activation_beside_a_loss(self):

    def fn(x, w):
      y = x * w
      return (y * y).mean(), y.clone()

    self.assert_matches_eager(fn, write=1)

  def test_one_execution_and_no_recompilation(self):

    def fn(x, w):
      out = x.mul(w)
      return (*out.unbind(0), out)

    compiled = torch.compile(fn, backend='openxla')
    x, w = _inputs(torch_xla.device(), False)
    with torch.no_grad():
      compiled(x, w)
      xm.wait_device_ops()
      met.clear_all()
      for _ in range(3):
        outs = compiled(x, w)
    xm.wait_device_ops()
    # One execution per call; the views are taken lazily, as in eager.
    self.assertEqual(met.metric_data('ExecuteTime')[0], 3)
    self.assertNotIn('UncachedCompile', met.counter_names())
    self.assertEqual(met.counter_value('DynamoExtractCompiledGraph'), None)
    outs[2].add_(100)
    self.assertTrue(torch.equal(outs[0].cpu(), outs[2][0].cpu()))

  def test_can_be_turned_off(self):

    def fn(x, w):
      out = x.mul(w)
      return out.view(-1), out

    x, w = _inputs(torch_xla.device(), False)
    dynamo_config.rebuild_aliased_outputs = False
    try:
      with torch.no_grad():
        flat, out = torch.compile(fn, backend='openxla')(x, w)
    finally:
      dynamo_config.rebuild_aliased_outputs = True
    flat.add_(100)
    self.assertFalse(torch.equal(flat.cpu(), out.cpu().view(-1)))


if __name__ == '__main__':
  test = unittest.main()
  sys.exit(0 if test.result.wasSuccessful() else 1)
