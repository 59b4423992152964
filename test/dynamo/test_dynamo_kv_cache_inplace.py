"""KV-cache writes through donated views stay in place (pytorch/xla#8832).

See "Writes through views" in [Note: Graph inputs that are views] in
torch_xla/_dynamo/dynamo_bridge.py: writes into views of a donated cache are
rewritten as one `index_put_` on the cache itself, so a step is one execution
that updates the donated buffer, with no recompilation.
"""
import sys
import unittest

from absl.testing import parameterized
import torch
import torch._dynamo
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

BLOCKS, BLOCK, HEADS, HEAD_DIM, SEQ = 6, 4, 2, 8, 24


def _values(*shape):
  return torch.arange(
      torch.Size(shape).numel(), dtype=torch.float32).reshape(shape) + 1


def _write(pattern, cache, x, index):
  """The write patterns of real KV caches, on one half (k or v) of a cache."""
  if pattern == 'index_copy0':  # vLLM: (blocks, block, heads, dim)
    cache.flatten(0, 1).index_copy_(0, index, x)
  elif pattern == 'index_put':
    cache.flatten(0, 1).index_put_((index,), x)
  elif pattern == 'index_copy2':  # static cache: (batch, heads, seq, dim)
    cache.index_copy_(2, index, x)
  else:  # slice assignment at a fixed position
    cache[:, :, SEQ - 3:SEQ] = x


def _half_shape(pattern):
  if pattern in ('index_copy0', 'index_put'):
    return (BLOCKS, BLOCK, HEADS, HEAD_DIM)
  return (1, HEADS, SEQ, HEAD_DIM)


def _update(pattern, step):
  """Rows to write at `step`: first and last slot of each half, and one more."""
  if pattern in ('index_copy0', 'index_put'):
    slots = BLOCKS * BLOCK
    return torch.tensor([0, slots - 1,
                         step + 1]), -_values(3, HEADS, HEAD_DIM) * step
  if pattern == 'index_copy2':
    return torch.tensor([0, SEQ - 1,
                         step + 1]), -_values(1, HEADS, 3, HEAD_DIM) * step
  return torch.tensor([0]), -_values(1, HEADS, 3, HEAD_DIM) * step


PATTERNS = ('index_copy0', 'index_put', 'index_copy2', 'slice')


class KVCacheInPlaceTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    torch._dynamo.reset()

  def run_steps(self, pattern, mode, layers=1, steps=4):
    """Writes every layer's k and v each step, compiled on XLA and on CPU."""
    half = _half_shape(pattern)

    def write_views(*args):
      caches, (k, v, index) = args[:-3], args[-3:]
      for cache in caches:
        torch.ops.xla.dynamo_set_buffer_donor_(cache, True)
      for k_cache, v_cache in zip(caches[0::2], caches[1::2]):
        _write(pattern, k_cache, k, index)
        _write(pattern, v_cache, v * 2, index)

    def write_base(cache, k, v, index):
      torch.ops.xla.dynamo_set_buffer_donor_(cache, True)
      for layer in range(layers):
        _write(pattern, cache[layer, 0], k, index)
        _write(pattern, cache[layer, 1], v * 2, index)

    device = torch_xla.device()
    xla_cache = torch.zeros((layers, 2) + half).to(device)
    cpu_cache = torch.zeros((layers, 2) + half)
    views = [xla_cache[l, i] for l in range(layers) for i in range(2)]
    fn = write_base if mode == 'base' else write_views
    compiled = torch.compile(fn, backend='openxla')
    torch_xla.sync()
    xm.wait_device_ops()
    met.clear_all()
    old_buffer = None
    for step in range(steps):
      index, k = _update(pattern, step + 1)
      v = k + 0.5
      if step == 1:
        # After warm-up: the cache's current buffer, to see it donated.
        xm.wait_device_ops()
        self.in_place_writes = met.counter_value('DynamoInPlaceViewWrite')
        old_buffer = torch_xla._XLAC._get_tensors_xla_device_data_node(
            [xla_cache])[1][0]
        met.clear_all()
      xla_inputs = ([xla_cache] if mode == 'base' else views) + [
          k.to(device), v.to(device),
          index.to(device)
      ]
      compiled(*xla_inputs)
      fn(
          *([cpu_cache] if mode == 'base' else
            [cpu_cache[l, i] for l in range(layers) for i in range(2)]), k, v,
          index)
      torch_xla.sync()
    xm.wait_device_ops()
    # Counted before the checks below, which execute graphs of their own.
    self.executions = met.metric_data('ExecuteTime')[0]
    self.compilations = met.metric_data('CompileTime')
    torch.testing.assert_close(xla_cache.cpu(), cpu_cache, rtol=0, atol=0)
    for l, view in enumerate(views):
      torch.testing.assert_close(
          view.cpu(), cpu_cache[l // 2, l % 2], rtol=0, atol=0)
    return old_buffer, steps - 1

  @parameterized.product(pattern=PATTERNS, mode=('view', 'base'))
  def test_one_execution_in_place(self, pattern, mode):
    old_buffer, steps = self.run_steps(pattern, mode)
    # Every write went to the cache itself, not through a copy of a view.
    self.assertEqual(self.in_place_writes, 2)
    # One execution per step, and no compilation after the first call.
    self.assertEqual(self.executions, steps)
    self.assertIsNone(self.compilations)
    # The donated buffer is the cache's own: a step frees the buffer the
    # cache had before it (the output aliases it).
    self.assertIn('Data Handle: Deleted',
                  torch_xla._XLAC._get_xla_tensor_debug_info(old_buffer))

  @parameterized.product(pattern=PATTERNS, mode=('view', 'base'))
  def test_slice_and_block_boundaries_each_layer(self, pattern, mode):
    # The first and last slot of each half of each layer (asserted against
    # the CPU inside run_steps).
    self.run_steps(pattern, mode, layers=3, steps=3)


if __name__ == '__main__':
  test = unittest.main()
  sys.exit(0 if test.result.wasSuccessful() else 1)
