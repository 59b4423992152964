"""One compiled graph for a function called on each layer's view of a pool.

See [Note: Views at a run-time offset] in torch_xla/_dynamo/view_offsets.py.
Every test compares every output and the pool with the same program run
eagerly on the CPU, call after call, and counts compilations.
"""
import sys
import unittest

from absl.testing import parameterized
import torch
import torch._dynamo
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

LAYERS, BLOCKS, BLOCK, HEADS, DIM = 6, 4, 4, 2, 8


def _values(*shape):
  return torch.arange(
      torch.Size(shape).numel(), dtype=torch.float32).reshape(shape) / 16


def _donate(t):
  torch.ops.xla.dynamo_set_buffer_donor_(t, True)


def _layer_step(layer, k, v, slots, rows):
  # vLLM's write of a layer's k and v, then reads: rows by index, all rows.
  _donate(layer)
  layer[0].flatten(0, 1).index_copy_(0, slots, k)
  layer[1].flatten(0, 1).index_copy_(0, slots, v)
  keys = layer[0].flatten(0, 1).index_select(0, rows)
  return keys * 2 + layer[1].flatten(0, 1)[rows], layer[1].sum()


class ViewOffsetsTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    torch._dynamo.reset()

  def compiles(self):
    xm.wait_device_ops()
    return (met.metric_data('CompileTime') or [0])[0]

  def run_layers(self, fn, make_args, views, passes=2):
    """Calls `fn` on each of `views(pool)` in turn, compiled on XLA and on the
    CPU; returns the compilations after the first call."""
    device = torch_xla.device()
    pool, cpu_pool = torch.zeros(LAYERS, 2, BLOCKS, BLOCK, HEADS,
                                 DIM).to(device), torch.zeros(
                                     LAYERS, 2, BLOCKS, BLOCK, HEADS, DIM)
    compiled = torch.compile(fn, backend='openxla')
    xla_views, cpu_views = views(pool), views(cpu_pool)  # taken once
    torch_xla.sync()
    first = None
    for step in range(passes):
      for i, (view, cpu_view) in enumerate(zip(xla_views, cpu_views)):
        args = make_args(step, i)
        out = compiled(view, *[a.to(device) for a in args])
        expected = fn(cpu_view, *args)
        first = self.compiles() if first is None else first
        for got, want in zip(out, expected):
          torch.testing.assert_close(got.cpu(), want, msg=f'{step}, {i}')
      torch_xla.sync()
      torch.testing.assert_close(pool.cpu(), cpu_pool, rtol=0, atol=0)
    return self.compiles() - first

  def test_layer_views_compile_once(self):
    met.clear_all()
    later = self.run_layers(
        _layer_step, lambda step, i:
        (_values(2, HEADS, DIM) + i, -_values(2, HEADS, DIM) - step,
         torch.tensor([step * 3 + i, BLOCKS * BLOCK - 1]),
         torch.tensor([0, step * 3 + i, BLOCKS * BLOCK - 1])), list)
    # The first call compiles the graph for all offsets; no layer compiles.
    self.assertEqual(later, 0)

  @parameterized.parameters((True, False), (False, True), (True, True))
  def test_layer_views_with_dynamic_shapes_or_grad(self, dynamic, grad):
    # Each layer's output scaled by a weight that requires grad, whose
    # gradient accumulates over the layers; or token counts that vary.
    def step(layer, k, v, slots, rows, w):
      keys, total = _layer_step(layer, k, v, slots, rows)
      return (keys * w).sum() + total

    device = torch_xla.device()
    pools = [torch.zeros(LAYERS, 2, BLOCKS, BLOCK, HEADS, DIM)]
    pools.append(pools[0].to(device))
    weights = [_values(DIM).requires_grad_(grad) for _ in pools]
    weights[1] = weights[1].detach().to(device).requires_grad_(grad)
    compiled = torch.compile(step, backend='openxla', dynamic=dynamic)
    layers = [list(pool) for pool in pools]
    first = None
    for call in range(2 * LAYERS):
      tokens, i = 1 + call % 3 if dynamic else 2, call % LAYERS
      args = (_values(tokens, HEADS, DIM) + call, -_values(tokens, HEADS, DIM),
              (torch.arange(tokens) * 3 + call) % (BLOCKS * BLOCK),
              torch.tensor([0, call]))
      for fn, pool_layers, w, dev in ((step, layers[0], weights[0], 'cpu'),
                                      (compiled, layers[1], weights[1],
                                       device)):
        with torch.set_grad_enabled(grad):
          out = fn(pool_layers[i], *[a.to(dev) for a in args], w)
          if grad:
            out.backward()
        if dev == 'cpu':
          expected = out.detach()
      torch.testing.assert_close(out.detach().cpu(), expected, msg=str(call))
      first = self.compiles() if first is None else first
    torch_xla.sync()
    torch.testing.assert_close(pools[1].cpu(), pools[0], rtol=0, atol=0)
    if grad:
      torch.testing.assert_close(weights[1].grad.cpu(), weights[0].grad)
    if not dynamic:  # lifted graphs have static shapes: one per token count
      # The graph for all offsets, compiled at the first call; its backward.
      self.assertEqual(self.compiles() - first, 1)

  def test_one_execution_a_call(self):
    device = torch_xla.device()
    pool = torch.zeros(LAYERS, 2, BLOCKS, BLOCK, HEADS, DIM).to(device)
    args = [
        t.to(device) for t in (_values(2, HEADS, DIM), _values(2, HEADS, DIM),
                               torch.tensor([1, 2]), torch.tensor([0, 1]))
    ]
    compiled = torch.compile(_layer_step, backend='openxla')
    layers = list(pool)
    torch_xla.sync()
    for layer in layers:
      compiled(layer, *args)
    self.assertEqual(met.counter_value('DynamoLiftedGraphForOffsets'), 1)
    torch_xla.sync()
    met.clear_all()
    for layer in layers:
      compiled(layer, *args)
    torch_xla.sync()
    xm.wait_device_ops()  # executions are counted when they finish
    self.assertEqual(self.compiles(), 0)
    self.assertEqual(met.metric_data('ExecuteTime')[0], LAYERS)

  def test_offsets_past_float32_precision(self):
    # A layer of 2**24 + 1 rows: later layers' offsets are past float32's
    # integers, where XLA's int64 division is wrong (pytorch/xla#2946).
    rows = 2**24 + 1

    def write(layer, k, index):
      _donate(layer)
      layer.index_copy_(0, index, k)

    device = torch_xla.device()
    pool, expected = torch.zeros(3, rows, 1).to(device), torch.zeros(3, rows, 1)
    compiled = torch.compile(write, backend='openxla')
    layers = list(pool)
    met.clear_all()
    for i, layer in enumerate(layers):
      k, index = _values(2, 1) + i, torch.tensor([i, rows - 1 - i])
      compiled(layer, k.to(device), index.to(device))
      write(expected[i], k, index)
    self.assertEqual(met.counter_value('DynamoLiftedGraphForOffsets'), 1)
    torch.testing.assert_close(pool.cpu(), expected, rtol=0, atol=0)

  def test_row_writes_after_a_write_left_functional(self):
    # The pool is passed too and first written through a transposed view,
    # which is not rewritten and under AOTAutograd leaves its functional
    # value strided: the layer's row write must not index its rows by number
    # (a layer at a time).
    def write(layer, pool, x, index):
      _donate(pool)
      pool.transpose(1, 4).index_copy_(0, index, x[:2] * 2)
      layer.transpose(0, 3)[:, 1:2].copy_(x[0, :, :1] * 3)

    device = torch_xla.device()
    expected = _values(LAYERS, 5, 2, 2, 5)
    pool = expected.to(device)
    compiled = torch.compile(write, backend='openxla')
    layers, expected_layers = list(pool), list(expected)
    met.clear_all()
    for i, layer in enumerate(layers):
      x, index = _values(LAYERS, 5, 2, 2, 5) - i, torch.tensor([i % 5, 5])
      compiled(layer, pool, x.to(device), index.to(device))
      write(expected_layers[i], expected, x, index)
    self.assertEqual(met.counter_value('DynamoLiftedGraphForOffsets'), 1)
    torch.testing.assert_close(pool.cpu(), expected, rtol=0, atol=0)

  def test_window_views_compile_once(self):
    # transformers' StaticCache writes the decode position's window.
    def write(window, x):
      _donate(window)
      window.copy_(x)
      return window * 2,

    met.clear_all()
    later = self.run_layers(
        write, lambda step, p: (torch.full(
            (LAYERS, 2, 1, BLOCK, HEADS, DIM), float(p + 10 * step)),),
        lambda pool: [pool[:, :, p:p + 1] for p in range(BLOCKS)])
    self.assertEqual(later, 0)

  def test_layout_change_compiles_again(self):
    # Windows of two sizes: two layouts, each compiled once for all offsets.
    def write(window, x):
      _donate(window)
      window.copy_(x)
      return window.sum(),

    met.clear_all()
    later = self.run_layers(
        write, lambda step, p:
        (_values(1, 2, 1 + p % 2, BLOCK, HEADS, DIM) + step,),
        lambda pool: [pool[:1, :, p:p + 1 + p % 2] for p in range(BLOCKS - 1)])
    # The size-2 windows compile their graph for all their offsets, as the
    # size-1 windows did at the first call.
    self.assertEqual(later, 1)

  def test_element_views_keep_their_offsets(self):
    # Views of one element are no rows of their base: a graph at their
    # offsets, from the first call on.
    def fn(a, x):
      _donate(a)
      a.copy_(x * -1)

    def views(base):
      return base.select(2, 1).select(1, 0)[0],

    device = torch_xla.device()
    cpu = _values(2, 5, 2)
    xla = cpu.to(device)
    compiled = torch.compile(fn, backend='openxla')
    for step in range(2):
      x = torch.tensor(float(step + 3))
      compiled(*views(xla), x.to(device))
      fn(*views(cpu), x)
      torch_xla.sync()
    torch.testing.assert_close(xla.cpu(), cpu, rtol=0, atol=0)

  def test_scalar_assignment_keeps_a_graph_per_offset(self):
    # `view[2:4] = 0.25` writes no tensor into the rows: a graph at the view's
    # offset, from the first call on.
    def fn(view):
      view[2:4] = 0.25

    device = torch_xla.device()
    cpu = _values(5, 5, 3, 3)
    xla = cpu.to(device)
    compiled = torch.compile(fn, backend='openxla')
    for base in (xla, cpu):
      for layer in (1, 3):
        (compiled if base is xla else fn)(base.select(3, 0).unbind(0)[layer])
    torch.testing.assert_close(xla.cpu(), cpu, rtol=0, atol=0)

  def test_writes_not_of_rows_keep_a_graph_per_offset(self):

    def write(layer, x):
      _donate(layer)
      layer.add_(x)
      return layer.sum(),

    met.clear_all()
    later = self.run_layers(
        write, lambda step, i: (torch.ones(2, BLOCKS, BLOCK, HEADS, DIM) * i,),
        list)
    self.assertEqual(later, LAYERS - 1)


if __name__ == '__main__':
  test = unittest.main()
  sys.exit(0 if test.result.wasSuccessful() else 1)
