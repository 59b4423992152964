"""KV-cache writes through donated views stay in place (pytorch/xla#8832).

See [Note: Writes through views in place] in
torch_xla/_dynamo/inplace_writes.py: writes into views of a donated cache are
rewritten as one `index_put_` on the cache itself, so a step is one execution
that updates the donated buffer, with no recompilation.
"""
import glob
import os
import subprocess
import sys
import tempfile
import unittest

from absl.testing import parameterized
import torch
import torch._dynamo
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.runtime as xr

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

  def assert_one_write_as_eager(self, write, cache, *args):
    """`write(cache, *args)` compiled on XLA writes the cache as eager does on
    the CPU, with one in-place write."""
    xla_cache = cache.to(torch_xla.device())
    met.clear_all()
    torch.compile(
        write, backend='openxla')(xla_cache,
                                  *[a.to(xla_cache.device) for a in args])
    write(cache, *args)
    self.assertEqual(met.counter_value('DynamoInPlaceViewWrite'), 1)
    torch.testing.assert_close(xla_cache.cpu(), cache, rtol=0, atol=0)

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
    if mode == 'tensors':  # a tensor per cache, each passed in
      views = [torch.zeros(half).to(device) for _ in views]
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
            [views[0] if mode == 'tensors' else xla_cache])[1][0]
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
    if mode != 'tensors':
      torch.testing.assert_close(xla_cache.cpu(), cpu_cache, rtol=0, atol=0)
    for l, view in enumerate(views):
      torch.testing.assert_close(
          view.cpu(), cpu_cache[l // 2, l % 2], rtol=0, atol=0)
    return old_buffer, steps - 1

  @parameterized.product(pattern=PATTERNS, mode=('view', 'base', 'tensors'))
  def test_one_execution_in_place(self, pattern, mode):
    old_buffer, steps = self.run_steps(pattern, mode)
    # Every write went to the cache itself, not through a copy of a view; a
    # tensor's own rows are written in place on the default path.
    default_path = mode == 'tensors' and pattern in ('index_copy0', 'index_put')
    self.assertEqual(self.in_place_writes, None if default_path else 2)
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

  def test_index_copy_with_int32_index_raises_as_in_eager(self):
    # index_copy_ takes int64 indices only; fake tensors do not check that,
    # so the rewrite must not accept what the op refuses.
    def write(cache, k, index):
      torch.ops.xla.dynamo_set_buffer_donor_(cache, True)
      cache[0].index_copy_(0, index, k)

    device = torch_xla.device()
    k, index = _values(2, HEAD_DIM), torch.tensor([1, 2], dtype=torch.int32)
    with self.assertRaisesRegex(RuntimeError, '(?i)long'):
      write(torch.zeros(2, SEQ, HEAD_DIM), k, index)
    with self.assertRaisesRegex(Exception, '(?i)long'):
      torch.compile(
          write,
          backend='openxla')(torch.zeros(2, SEQ, HEAD_DIM, device=device),
                             k.to(device), index.to(device))
      torch_xla.sync()

  def test_index_copy_of_another_dtype_raises_as_in_eager(self):
    # XLA's kernel would convert a half source; eager refuses it.
    def write(cache, k, index):
      torch.ops.xla.dynamo_set_buffer_donor_(cache, True)
      cache[0].index_copy_(0, index, k)

    device = torch_xla.device()
    k, index = _values(2, HEAD_DIM).half(), torch.tensor([1, 2])
    with self.assertRaisesRegex(RuntimeError, 'same dtype'):
      write(torch.zeros(2, SEQ, HEAD_DIM), k, index)
    with self.assertRaisesRegex(Exception, 'same dtype'):
      torch.compile(
          write,
          backend='openxla')(torch.zeros(2, SEQ, HEAD_DIM, device=device),
                             k.to(device), index.to(device))

  def test_dynamic_shapes_are_not_rewritten(self):
    # With symbolic sizes the rows cannot be computed once for all calls.
    def write(cache, index, k):
      torch.ops.xla.dynamo_set_buffer_donor_(cache, True)
      cache[1].index_copy_(0, index, k)

    compiled = torch.compile(write, backend='openxla', dynamic=True)
    index, k = torch.tensor([0, 5]), _values(2, 4)
    for n in (8, 16, 32):
      met.clear_all()
      cache, expected = torch.zeros(2, n, 4, device=torch_xla.device()), \
          torch.zeros(2, n, 4)
      compiled(cache, index.to(cache.device), k.to(cache.device))
      expected[1].index_copy_(0, index, k)
      torch.testing.assert_close(cache.cpu(), expected, rtol=0, atol=0)
      self.assertIsNone(met.counter_value('DynamoInPlaceViewWrite'))

  @parameterized.parameters(((1, 2, HEAD_DIM),), ((HEAD_DIM,),), ((),))
  def test_sources_that_broadcast(self, shape):
    # Eager's copy_ takes a source with leading unit dims, or fewer dims.
    def write(cache, src):
      torch.ops.xla.dynamo_set_buffer_donor_(cache, True)
      cache[0][1:3] = src

    self.assert_one_write_as_eager(write, torch.zeros(2, SEQ, HEAD_DIM),
                                   _values(*shape) + 1)

  def test_rows_past_float32_precision(self):
    # XLA divides int64 tensors in float32 (pytorch/xla#2946): rows past
    # 2**24 must still be written at their own row of the base.
    rows = 2**24 + 1

    def write(cache, k, index):
      torch.ops.xla.dynamo_set_buffer_donor_(cache, True)
      cache[1].index_copy_(0, index, k)

    self.assert_one_write_as_eager(write, torch.zeros(2, rows, 1),
                                   _values(3, 1),
                                   torch.tensor([0, rows - 2, rows - 1]))

  def test_coordinates_divide_exactly(self):
    # A sharded base is written at coordinates, which must divide exactly
    # where XLA's int64 division does not (pytorch/xla#2946).
    from torch_xla._dynamo import inplace_writes
    rows = torch.tensor([0, 5, 2**24 + 1, 2**24 + 3, 2**40 + 7, 2**62 + 1])
    for n in (1, 6, 8, 2**24 + 1, 3 * 2**20):
      quotient, remainder = inplace_writes._divmod(
          rows.to(torch_xla.device()), n)
      self.assertEqual(quotient.cpu().tolist(), (rows // n).tolist())
      self.assertEqual(remainder.cpu().tolist(), (rows % n).tolist())

  def test_row_write_after_a_write_left_functional(self):
    # The index_copy_ into a transposed view is not rewritten: under
    # AOTAutograd it leaves the base's functional value strided, so the row
    # write after it must not index the base's rows by number.
    def write(base, x, index):
      torch.ops.xla.dynamo_set_buffer_donor_(base, True)
      base.transpose(0, 3).index_copy_(0, index, x[:2] * 2)
      base.transpose(0, 3)[:, 1:2].copy_(x[:, :1] * 3)

    self.assert_one_write_as_eager(write,
                                   _values(5, 2, 2, 5) + 1, _values(5, 2, 2, 5),
                                   torch.tensor([0, 4]))

  def test_row_write_beside_a_write_of_an_intermediate(self):
    # A tensor the graph makes, written along its dim 0, is no cache: the
    # cache's row write beside it is rewritten all the same.
    def write(cache, x, index):
      torch.ops.xla.dynamo_set_buffer_donor_(cache, True)
      y = torch.zeros_like(x)
      y.copy_(x * 2)
      cache[1].index_copy_(0, index, y)

    self.assert_one_write_as_eager(write, _values(2, SEQ, HEAD_DIM),
                                   _values(2, HEAD_DIM), torch.tensor([3, 0]))

  def test_function_per_layer_compiles_once(self):
    # One compiled function called on each layer's view of one donated cache,
    # as a per-layer attention is: one graph for all layers, lifted and
    # compiled at the first call; after that a call is one execution.
    layers = 32

    def write_layer(layer_cache, k, index):
      torch.ops.xla.dynamo_set_buffer_donor_(layer_cache, True)
      layer_cache[0].index_copy_(0, index, k)
      layer_cache[1].index_copy_(0, index, k * 2)

    device = torch_xla.device()
    cpu_cache = torch.zeros(layers, 2, SEQ, HEAD_DIM)
    xla_cache = cpu_cache.to(device)
    compiled = torch.compile(write_layer, backend='openxla')
    for step in range(2):
      torch_xla.sync()
      xm.wait_device_ops()
      met.clear_all()
      for layer in range(layers):
        index = torch.tensor([step, SEQ - 1 - layer % (SEQ - 2)])
        k = _values(2, HEAD_DIM) + layer
        compiled(xla_cache[layer], k.to(device), index.to(device))
        write_layer(cpu_cache[layer], k, index)
        torch_xla.sync()
    xm.wait_device_ops()
    self.assertIsNone(met.counter_value('DynamoLiftedGraph'))
    self.assertIsNone(met.metric_data('CompileTime'))
    self.assertEqual(met.metric_data('ExecuteTime')[0], layers)
    torch.testing.assert_close(xla_cache.cpu(), cpu_cache, rtol=0, atol=0)


def _decode_step(*args):
  """A decoder step over one allocation (layers, 2, blocks, block, heads, dim).

  Takes the cache, or its k and v halves of each layer. Each layer writes its
  new k and v, then reads rows of them back before the next layer writes. The
  attention does not feed the next layer's k and v: nothing but the rewrite
  orders the reads before the next write.
  """
  caches, (x, q, slots, rows) = args[:-4], args[-4:]
  for cache in caches:
    torch.ops.xla.dynamo_set_buffer_donor_(cache, True)
  if len(caches) == 1:
    caches = [half for layer in caches[0] for half in layer]
  # A read before the first write too.
  outs = [caches[-1].flatten(0, 1).index_select(0, rows).sum((0, 2))]
  for layer, (k_cache, v_cache) in enumerate(zip(caches[0::2], caches[1::2])):
    k_cache.flatten(0, 1).index_copy_(0, slots, x * (layer + 1))
    v_cache.flatten(0, 1).index_copy_(0, slots, x - layer)
    keys = k_cache.flatten(0, 1).index_select(0, rows)
    values = v_cache.flatten(0, 1).index_select(0, rows)
    scores = torch.einsum('hd,rhd->hr', q, keys).softmax(-1)
    outs.append(torch.einsum('hr,rhd->hd', scores, values).sum(-1))
  return torch.stack(outs)


class InterleavedReadsTest(parameterized.TestCase):
  """Reads of a one-allocation cache between the layers' writes.

  See [Note: Writes through views in place].
  """

  def setUp(self):
    super().setUp()
    torch._dynamo.reset()

  @parameterized.parameters('base', 'view', 'layer')
  def test_decoder_one_allocation(self, mode):
    # base: the cache passed; view: its halves taken again at every call;
    # layer: a call a layer on its halves taken once (the graph for views at
    # a run-time offset, [Note: Views at a run-time offset]).
    layers, steps, slots_total = 2, 5, BLOCKS * BLOCK
    shape = (layers, 2, BLOCKS, BLOCK, HEADS, HEAD_DIM)
    device = torch_xla.device()
    cpu_cache = _values(*shape) / 100
    xla_cache = cpu_cache.to(device)

    def halves(cache):
      if mode == 'base':
        return [cache]
      return [cache[l, i] for l in range(layers) for i in range(2)]

    compiled = torch.compile(_decode_step, backend='openxla')
    if mode == 'layer':  # taken once
      kept = [(xla_cache[l, 0], xla_cache[l, 1]) for l in range(layers)]
    torch_xla.sync()
    xm.wait_device_ops()
    met.clear_all()
    for step in range(steps):
      x = _values(2, HEADS, HEAD_DIM) * (step + 1) / 1000
      q = torch.ones(HEADS, HEAD_DIM) / (step + 1)
      # The last slot and a slot that moves; the rows read include both.
      slots = torch.tensor([slots_total - 1, step])
      rows = torch.tensor([0, step, slots_total - 1, (step + 7) % slots_total])
      if step == 1:  # after warm-up
        xm.wait_device_ops()
        in_place_writes = met.counter_value('DynamoInPlaceViewWrite')
        old_buffer = torch_xla._XLAC._get_tensors_xla_device_data_node(
            [xla_cache])[1][0]
        met.clear_all()
      inputs = [x, q, slots, rows]
      if mode == 'layer':
        for l in range(layers):
          out = compiled(*kept[l], *[t.to(device) for t in inputs])
          expected = _decode_step(*cpu_cache[l], *inputs)
      else:
        out = compiled(*halves(xla_cache), *[t.to(device) for t in inputs])
        expected = _decode_step(*halves(cpu_cache), *inputs)
      torch_xla.sync()
      torch.testing.assert_close(out.cpu(), expected)
    xm.wait_device_ops()
    executions = met.metric_data('ExecuteTime')[0]
    compilations = met.metric_data('CompileTime')
    torch.testing.assert_close(xla_cache.cpu(), cpu_cache, rtol=0, atol=0)
    self.assertEqual(in_place_writes, 2 if mode == 'layer' else 2 * layers)
    # One execution per call, and no compilation after the first call; views
    # taken again at every call are synced before the call donates their base
    # ([Note: Pending readers of a donated buffer]): one more execution.
    self.assertEqual(executions,
                     (steps - 1) * dict(base=1, view=2, layer=layers)[mode])
    self.assertIsNone(compilations)
    # The cache's own buffer is donated and written in place.
    self.assertIn('Data Handle: Deleted',
                  torch_xla._XLAC._get_xla_tensor_debug_info(old_buffer))

  @unittest.skipIf(xr.device_type() != 'CPU', 'reads the CPU HLO layouts')
  def test_no_copy_of_the_cache(self):
    # XLA keeps a value read before an in-place write of its buffer by copying
    # the whole buffer. Runs the tests above with the optimized HLO dumped:
    # torch_xla exposes only the HLO before optimizations
    # (`_get_xla_tensors_hlo`), no memory statistics on the CPU, and reads
    # XLA_FLAGS once, when its runtime starts.
    with tempfile.TemporaryDirectory() as dump:
      flags = f'--xla_dump_to={dump} --xla_dump_hlo_as_text'
      env = dict(
          os.environ, XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} {flags}")
      tests = [
          f'{type(self).__name__}.test_decoder_one_allocation{i}'
          for i in range(3)
      ]
      subprocess.run([sys.executable, __file__] + tests, env=env, check=True)
      hlo = ''.join(
          open(f).read()
          for f in glob.glob(os.path.join(dump, '*after_optimizations.txt')))
    cache = f'f32[2,2,{BLOCKS},{BLOCK},{HEADS},{HEAD_DIM}]{{5,4,3,2,1,0}}'
    rows = f'f32[{2 * 2 * BLOCKS * BLOCK},{HEADS},{HEAD_DIM}]{{2,1,0}}'
    self.assertIn(f'{rows} scatter(', hlo)  # its rows, by number
    for shape in (cache, rows):
      self.assertEqual(hlo.count(f'{shape} copy('), 0)


class CompileOncePlanOnceTest(parameterized.TestCase):
  """A decode loop with fresh arguments at every call, as a server runs it:
  one graph compiled for all layers, a call planned once per layer."""

  def setUp(self):
    super().setUp()
    torch._dynamo.reset()

  @parameterized.parameters('tensors', 'kept', 'taken', 'report')
  def test_decode_loop(self, layout):
    layers, steps = 3, 100

    def write(k_cache, v_cache, k, slots):
      torch.ops.xla.dynamo_set_buffer_donor_(k_cache, True)
      torch.ops.xla.dynamo_set_buffer_donor_(v_cache, True)
      k_cache.flatten(0, 1).index_copy_(0, slots, k)
      v_cache.flatten(0, 1).index_copy_(0, slots, k * 2)
      return k_cache.flatten(0, 1)[:4].sum() + v_cache.flatten(0, 1)[:4].sum()

    device = torch_xla.device()
    half = (BLOCKS, BLOCK, HEADS, HEAD_DIM)
    cpu_pool = torch.zeros((layers, 2) + half)
    pool = cpu_pool.to(device)
    tensors = [torch.zeros(half).to(device) for _ in range(2 * layers)]
    per_layer = [torch.zeros((2,) + half).to(device) for _ in range(layers)]
    kept = [tuple(pool[l]) for l in range(layers)]

    def caches(l):
      if layout == 'tensors':
        return tensors[2 * l:2 * l + 2]
      if layout == 'kept':
        return kept[l]
      if layout == 'taken':
        return tuple(pool[l])
      key_cache, value_cache = per_layer[l]  # pytorch/xla#8832
      return key_cache, value_cache

    compiled = torch.compile(write, backend='openxla')
    torch_xla.sync()
    met.clear_all()
    for step in range(steps):
      for l in range(layers):
        slots = torch.tensor([step % (BLOCKS * BLOCK), (7 * step + l) % 11])
        k = torch.randn(2, HEADS, HEAD_DIM)
        out = compiled(*caches(l), k.to(device), slots.to(device))
        expected = write(*cpu_pool[l], k, slots)
      torch_xla.sync()
      if step == 1:  # the syncs have compiled theirs too
        compiles = met.metric_data('CompileTime')[0]
    torch.testing.assert_close(out.cpu(), expected)
    # One graph for every layer, compiled once (Dynamo's, AOTAutograd's and
    # XLA's), and a plan per layout: each layer's views of the pool, the
    # views of any layer's tensor; a tensor's own rows take the default path.
    self.assertEqual(met.counter_value('DynamoExtractCompiledGraph'), 1)
    self.assertEqual(met.metric_data('CompileTime')[0], compiles)
    self.assertEqual(
        met.counter_value('DynamoViewInputsPlan'),
        dict(tensors=None, report=1).get(layout, layers))
    for l in range(layers):
      for i, cache in enumerate(caches(l)):
        torch.testing.assert_close(cache.cpu(), cpu_pool[l, i], rtol=0, atol=0)


def _first_rows_write(device):
  """Writes rows 0 and 1 of two views, donated on XLA: eager on the CPU,
  compiled on XLA."""

  def write(k_cache, v_cache, k):
    if device != 'cpu':
      torch.ops.xla.dynamo_set_buffer_donor_(k_cache, True)
      torch.ops.xla.dynamo_set_buffer_donor_(v_cache, True)
    k_cache[:2] = k
    v_cache[:2] = k * 2

  return write if device == 'cpu' else torch.compile(write, backend='openxla')


class NewBaseValuesTest(parameterized.TestCase):
  """A call on views of a donated cache gives the cache its new value as an
  in-place op does, with no eager op on it after the graph ([Note: New values
  of donated bases])."""

  def setUp(self):
    super().setUp()
    torch._dynamo.reset()

  @parameterized.parameters('kept', 'report')
  def test_warm_call_runs_no_eager_op_on_the_cache(self, layout):

    def write(k_cache, v_cache, k, slots):
      torch.ops.xla.dynamo_set_buffer_donor_(k_cache, True)
      torch.ops.xla.dynamo_set_buffer_donor_(v_cache, True)
      k_cache.flatten(0, 1).index_copy_(0, slots, k)
      v_cache.flatten(0, 1).index_copy_(0, slots, k * 2)
      return k_cache.flatten(0, 1)[:4] + v_cache.flatten(0, 1)[:4]

    layers, device = 2, torch_xla.device()
    cpu = torch.zeros(layers, 2, BLOCKS, BLOCK, HEADS, HEAD_DIM)
    pool = cpu.to(device)
    kept = [tuple(pool[l]) for l in range(layers)]
    compiled = torch.compile(write, backend='openxla')
    for step in range(3):
      for l in range(layers):
        slots = torch.tensor([step, BLOCKS * BLOCK - 1 - l])
        k = _values(2, HEADS, HEAD_DIM) * (step + 1)
        if layout == 'kept':
          caches = kept[l]
        else:
          key_cache, value_cache = pool[l]  # pytorch/xla#8832
          caches = key_cache, value_cache
        args = caches + (k.to(device), slots.to(device))
        met.clear_all()
        out = compiled(*args)
        ops = {n for n in met.counter_names() if n.startswith('xla::')}
        torch.testing.assert_close(out.cpu(), write(*cpu[l], k, slots))
      torch_xla.sync()
    torch.testing.assert_close(pool.cpu(), cpu, rtol=0, atol=0)
    for l in range(layers):
      for i in range(2):
        torch.testing.assert_close(kept[l][i].cpu(), cpu[l, i], rtol=0, atol=0)
    # AOTAutograd's `copy_` of the new value into the cache, and making its
    # buffer the cache's data again, are eager ops: a warm call runs none.
    self.assertEqual(ops & {'xla::copy', 'xla::_copy_from', 'xla::set_'}, set())

  def test_version_counter_as_in_eager(self):
    # A tensor saved for backward before the call, written by it: backward
    # raises as in eager, whose in-place write bumps the version counter.
    for device in ('cpu', torch_xla.device()):
      cache = torch.zeros(2, SEQ, HEAD_DIM, device=device)
      weight = torch.ones(SEQ, HEAD_DIM, device=device, requires_grad=True)
      loss = (cache[0] * weight).sum()

      key_cache, value_cache = cache
      fn = _first_rows_write(device)
      version = cache._version
      fn(key_cache, value_cache, torch.ones(2, HEAD_DIM, device=device))
      self.assertGreater(cache._version, version)
      with self.assertRaisesRegex(RuntimeError, 'modified by an inplace'):
        loss.backward()

  def test_grad_mode_keeps_autograd_history(self):
    # A write of a value that requires grad makes the cache require grad, as
    # in eager: AOTAutograd's copy records it.
    results = []
    for device in ('cpu', torch_xla.device()):
      cache = torch.zeros(2, SEQ, HEAD_DIM, device=device)
      k = torch.ones(2, HEAD_DIM, device=device, requires_grad=True)

      fn = _first_rows_write(device)
      fn(cache[0], cache[1], k)
      self.assertTrue(cache.requires_grad)
      cache.sum().backward()
      results.append((cache.detach().cpu(), k.grad.cpu()))
    torch.testing.assert_close(results[1], results[0], rtol=0, atol=0)

  def test_views_returned_alias_the_cache(self):
    # Views of the cache returned by the call see a later write of it, as in
    # eager: AOTAutograd rebuilds them from the cache after its copy.
    results = []
    for device in ('cpu', torch_xla.device()):

      def write(k_cache, v_cache, k, slots):
        if device != 'cpu':
          torch.ops.xla.dynamo_set_buffer_donor_(k_cache, True)
          torch.ops.xla.dynamo_set_buffer_donor_(v_cache, True)
        k_cache.index_copy_(0, slots, k)
        v_cache.index_copy_(0, slots, k * 2)
        return k_cache.flatten(0, 1), v_cache[1]

      fn = write if device == 'cpu' else torch.compile(write, backend='openxla')
      pool = torch.zeros(2, 2, SEQ, HEAD_DIM, device=device)
      outs = []
      for step in range(3):
        key_cache, value_cache = pool[step % 2]
        k = torch.full((1, HEAD_DIM), step + 1.0, device=device)
        outs.append(
            fn(key_cache, value_cache, k, torch.tensor([step], device=device)))
        pool.add_(1)
      results.append([t.cpu() for out in outs for t in out] + [pool.cpu()])
    torch.testing.assert_close(results[1], results[0], rtol=0, atol=0)


if __name__ == '__main__':
  test = unittest.main()
  sys.exit(0 if test.result.wasSuccessful() else 1)
