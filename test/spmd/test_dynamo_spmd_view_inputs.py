"""torch.compile(backend="openxla") on sharded KV caches and views of them.

pytorch/xla#8832: a compiled function that writes a KV cache through views of
one eager XLA tensor, passed in as the views (`k_cache, v_cache = cache`) or
taken inside the compiled function (`cache[0]`, `cache[1]`), and donated with
`dynamo_set_buffer_donor_`. Here the cache is sharded over its heads dim (or
replicated) on an SPMD mesh. Every test runs the same program eagerly on the
CPU and compares the cache and its views exactly after every call, with new
k, v and slots on every call, so a graph that replays the first call's inputs
fails. See [Note: Graph inputs that are views] in
torch_xla/_dynamo/view_inputs.py.
"""
import sys
import unittest

from absl.testing import parameterized
import numpy as np
import torch
import torch._dynamo
import torch_xla
import torch_xla.debug.metrics as met
import torch_xla.runtime as xr
import torch_xla.distributed.spmd as xs

# vLLM layout: (2, blocks, block size, heads, head dim).
BLOCKS, BLOCK, HEADS, HEAD_DIM = 4, 4, 4, 8
# transformers' StaticCache layout: (2, batch, heads, max length, head dim).
MAX_LEN = 16
# Tokens written per call.
TOKENS = 3
CALLS = 4


def _donate(*tensors):
  for t in tensors:
    torch.ops.xla.dynamo_set_buffer_donor_(t, True)


def _write_paged(half, x, slots):
  # vLLM: (blocks, block size, heads, head dim), one slot per token.
  half.flatten(0, 1).index_copy_(0, slots, x)


def _write_static(half, x, positions):
  # transformers' StaticCache: (batch, heads, max length, head dim).
  half.index_copy_(2, positions, x)


def _cache_writer(write, donate):
  """Takes the cache and writes it through cache[0] and cache[1]."""

  def write_cache(cache, k, v, index):
    if donate:
      _donate(cache)
    write(cache[0], k, index)
    write(cache[1], v, index)

  return write_cache


def _views_writer(write, donate):
  """Takes the views `k_cache, v_cache = cache` and writes them."""

  def write_views(k_cache, v_cache, k, v, index):
    if donate:
      _donate(k_cache, v_cache)
    write(k_cache, k, index)
    write(v_cache, v, index)

  return write_views


def _paged_step(call):
  """New k, v and slots for `call`: distinct slots, new values."""
  g = torch.Generator().manual_seed(1000 + call)
  slots = torch.randperm(BLOCKS * BLOCK, generator=g)[:TOKENS]
  k = torch.randn(TOKENS, HEADS, HEAD_DIM, generator=g)
  v = torch.randn(TOKENS, HEADS, HEAD_DIM, generator=g)
  return k, v, slots


def _static_step(call):
  """New k, v and positions for `call`: distinct positions, new values."""
  g = torch.Generator().manual_seed(2000 + call)
  positions = torch.randperm(MAX_LEN, generator=g)[:TOKENS]
  k = torch.randn(1, HEADS, TOKENS, HEAD_DIM, generator=g)
  v = torch.randn(1, HEADS, TOKENS, HEAD_DIM, generator=g)
  return k, v, positions


# Each layout: the cache's shape, the partition spec of the cache, the
# partition spec of k and v, the write into one half (k or v) of the cache,
# and the inputs of each call. The caches are sharded over their heads dim
# (and k and v too), but for 'paged_by_block', sharded over its blocks dim.
LAYOUTS = {
    'paged': (
        (2, BLOCKS, BLOCK, HEADS, HEAD_DIM), (None, None, None, 'x', None),
        (None, 'x', None), _write_paged, _paged_step),
    'paged_by_block': (
        (2, BLOCKS, BLOCK, HEADS, HEAD_DIM), (None, 'x', None, None, None),
        None, _write_paged, _paged_step),
    'static': ((2, 1, HEADS, MAX_LEN, HEAD_DIM), (None, None, 'x', None, None),
               (None, 'x', None, None), _write_static, _static_step),
}


class DynamoSpmdViewInputsTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    xr.use_spmd()
    cls.n_devices = xr.global_runtime_device_count()

  def setUp(self):
    super().setUp()
    if self.n_devices < 2 or HEADS % self.n_devices or BLOCKS % self.n_devices:
      self.skipTest(f'needs 2 or more devices that divide {HEADS} heads and '
                    f'{BLOCKS} blocks, has {self.n_devices}')
    torch._dynamo.reset()
    self.mesh = xs.Mesh(np.arange(self.n_devices), (self.n_devices,), ('x',))

  def make_cache(self, layout, sharded):
    """The same cache on XLA (sharded or replicated) and on the CPU."""
    shape, spec = LAYOUTS[layout][:2]
    cpu_cache = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    xla_cache = cpu_cache.to(torch_xla.device())
    if sharded:
      xs.mark_sharding(xla_cache, self.mesh, spec)
    torch_xla.sync()
    return xla_cache, cpu_cache

  def assert_same(self, xla, cpu, where):
    """Every named XLA tensor holds exactly its CPU counterpart."""
    for name, cpu_tensor in cpu.items():
      torch.testing.assert_close(
          xla[name].cpu(),
          cpu_tensor,
          rtol=0,
          atol=0,
          msg=lambda m: f'{where}, {name}: {m}')

  def run_calls(self,
                layout,
                inputs,
                donate,
                sharded=True,
                shard_kv=False,
                calls=CALLS):
    """Runs a cache write compiled on XLA and eagerly on the CPU, `calls` times.

    `inputs` is 'cache' (the function takes the cache and writes it through
    `cache[0]`, `cache[1]`) or 'views' (it takes `k_cache, v_cache = cache`).
    The cache and its views are compared with the CPU after every call.
    Returns the XLA tensors, the CPU tensors and the cache's sharding spec
    before the first call.
    """
    xla_cache, cpu_cache = self.make_cache(layout, sharded)
    kv_spec, write, step = LAYOUTS[layout][2:]
    writer = _cache_writer if inputs == 'cache' else _views_writer
    fn = writer(write, donate)
    spec = torch_xla._XLAC._get_xla_sharding_spec(xla_cache)
    xla = {'cache': xla_cache}
    cpu = {'cache': cpu_cache}
    xla['k_cache'], xla['v_cache'] = xla_cache
    cpu['k_cache'], cpu['v_cache'] = cpu_cache
    cache_args = ['cache'] if inputs == 'cache' else ['k_cache', 'v_cache']
    compiled = torch.compile(fn, backend='openxla')
    for call in range(calls):
      k, v, index = step(call)
      xla_k, xla_v = k.to(torch_xla.device()), v.to(torch_xla.device())
      if shard_kv:
        xs.mark_sharding(xla_k, self.mesh, kv_spec)
        xs.mark_sharding(xla_v, self.mesh, kv_spec)
      compiled(*[xla[n] for n in cache_args], xla_k, xla_v,
               index.to(torch_xla.device()))
      fn(*[cpu[n] for n in cache_args], k, v, index)
      self.assert_same(xla, cpu, f'call {call}')
    return xla, cpu, spec

  @parameterized.parameters(False, True)
  def test_cache_passed_in_donated(self, shard_kv):
    self.run_calls('paged', 'cache', donate=True, shard_kv=shard_kv)

  @parameterized.product(donate=(True, False), sharded=(True, False))
  def test_views_passed_in(self, donate, sharded):
    self.run_calls('paged', 'views', donate=donate, sharded=sharded)

  @parameterized.parameters(True, False)
  def test_static_cache_views_passed_in(self, donate):
    self.run_calls('static', 'views', donate=donate)

  def test_static_cache_tensors_written_in_place(self):
    # A static cache as a donated tensor per cache, passed in, sharded over
    # heads and written along dim 2: in place, its sharding kept.
    shape, spec = LAYOUTS['static'][0][1:], LAYOUTS['static'][1][1:]
    g = torch.Generator().manual_seed(0)
    cpu = {n: torch.randn(shape, generator=g) for n in ('k_cache', 'v_cache')}
    xla = {n: t.to(torch_xla.device()) for n, t in cpu.items()}
    for t in xla.values():
      xs.mark_sharding(t, self.mesh, spec)
    torch_xla.sync()
    fn = _views_writer(_write_static, donate=True)
    compiled = torch.compile(fn, backend='openxla')
    met.clear_all()
    for call in range(CALLS):
      k, v, index = _static_step(call)
      compiled(*xla.values(),
               *[t.to(torch_xla.device()) for t in (k, v, index)])
      fn(*cpu.values(), k, v, index)
      self.assert_same(xla, cpu, f'call {call}')
    self.assertEqual(met.counter_value('DynamoInPlaceViewWrite'), 2)
    self.assertIn(f'devices=[1,{self.n_devices},1,1]',
                  torch_xla._XLAC._get_xla_sharding_spec(xla['k_cache']))

  @parameterized.product(
      layout=('paged', 'paged_by_block', 'static'),
      inputs=('cache', 'views'),
      donate=(True, False))
  def test_sharding_and_values_after_sync(self, layout, inputs, donate):
    xla, cpu, spec = self.run_calls(layout, inputs, donate=donate)
    self.assertIn('devices=', spec)
    self.assertEqual(torch_xla._XLAC._get_xla_sharding_spec(xla['cache']), spec)
    torch_xla.sync()
    self.assertEqual(torch_xla._XLAC._get_xla_sharding_spec(xla['cache']), spec)
    self.assert_same(xla, cpu, 'after sync')
    # Views taken after the calls see the writes too.
    self.assert_same({
        'k_cache': xla['cache'][0],
        'v_cache': xla['cache'][1]
    }, {
        'k_cache': cpu['cache'][0],
        'v_cache': cpu['cache'][1]
    }, 'new views after sync')

  def test_one_graph_for_each_layer_of_a_sharded_pool(self):
    # A per-layer step called on each layer's view of one pool sharded over
    # heads: right values, and the pool keeps its sharding.
    def step(layer, k, slots, rows):
      torch.ops.xla.dynamo_set_buffer_donor_(layer, True)
      layer[0].index_copy_(0, slots, k)
      layer[1].index_copy_(0, slots, -k)
      return layer[0].index_select(0, rows) + layer[1][rows]

    layers, slots_total = 3, BLOCKS * BLOCK
    cpu_pool = torch.randn(layers, 2, slots_total, HEADS, HEAD_DIM)
    pool = cpu_pool.to(torch_xla.device())
    xs.mark_sharding(pool, self.mesh, (None, None, None, 'x', None))
    views, cpu_views = list(pool), list(cpu_pool)
    torch_xla.sync()
    compiled = torch.compile(step, backend='openxla')
    for call in range(2 * layers):
      l = call % layers
      args = [
          torch.randn(2, HEADS, HEAD_DIM),
          torch.tensor([call, slots_total - 1]),
          torch.tensor([0, call, slots_total - 1])
      ]
      out = compiled(views[l], *[a.to(torch_xla.device()) for a in args])
      torch.testing.assert_close(out.cpu(), step(cpu_views[l], *args))
    torch_xla.sync()
    torch.testing.assert_close(pool.cpu(), cpu_pool)
    self.assertIn('devices=[1,1,1,4,1]',
                  torch_xla._XLAC._get_xla_sharding_spec(pool))

  @parameterized.product(
      take=['once', 'step'],
      order=['forward', 'reversed'],
      sync=['call', 'end'])
  def test_decoder_loop_two_views_a_call(self, take, order, sync):
    # The report's write, `key_cache, value_cache = pool[l]`, on each layer of
    # a pool sharded over heads, for 3 steps; pool and outputs against CPU
    # eager, the pool keeps its sharding.
    def write(key_cache, value_cache, k, slots):
      _donate(key_cache, value_cache)
      key_cache.index_copy_(0, slots, k)
      value_cache.index_copy_(0, slots, -k)
      return key_cache.sum() - value_cache[0].sum()

    layers, device = 4, torch_xla.device()
    cpu_pool = torch.randn(layers, 2, BLOCKS * BLOCK, HEADS, HEAD_DIM)
    pool = cpu_pool.to(device)
    xs.mark_sharding(pool, self.mesh, (None, None, None, 'x', None))
    kept = [(tuple(pool[l]), tuple(cpu_pool[l])) for l in range(layers)]
    torch_xla.sync()
    compiled = torch.compile(write, backend='openxla')
    order = list(range(layers))[::1 if order == 'forward' else -1]
    for step, l in [(s, l) for s in range(3) for l in order]:
      views, cpu_views = kept[l] if take == 'once' else (tuple(pool[l]),
                                                         tuple(cpu_pool[l]))
      k = torch.randn(2, HEADS, HEAD_DIM)
      slots = torch.tensor([step, BLOCKS * BLOCK - 1 - l])
      out = compiled(*views, k.to(device), slots.to(device))
      if sync == 'call':
        torch_xla.sync()
      torch.testing.assert_close(
          out.cpu(), write(*cpu_views, k, slots), rtol=1e-4,
          atol=1e-4)  # sums over 4 shards, in another order
    torch_xla.sync()
    torch.testing.assert_close(pool.cpu(), cpu_pool, rtol=0, atol=0)
    self.assertIn('devices=[1,1,1,4,1]',
                  torch_xla._XLAC._get_xla_sharding_spec(pool))

  @parameterized.parameters('product', 'clone', 'sibling')
  def test_reads_pending_when_a_sharded_pool_is_donated(self, read):
    # An eager read of a layer's keys, taken before the call that donates the
    # sharded pool, keeps the keys from before the call, as on CPU.
    def write(key_cache, k, slots):
      _donate(key_cache)
      key_cache.index_copy_(0, slots, k)

    readers = dict(
        product=lambda kc, vc: kc * 2,
        clone=lambda kc, vc: kc.clone(),
        sibling=lambda kc, vc: vc)
    layers, device = 2, torch_xla.device()
    cpu_pool = torch.randn(layers, 2, BLOCKS * BLOCK, HEADS, HEAD_DIM)
    pool = cpu_pool.to(device)
    xs.mark_sharding(pool, self.mesh, (None, None, None, 'x', None))
    torch_xla.sync()
    compiled = torch.compile(write, backend='openxla')
    reads = []
    for step, l in [(s, l) for s in range(3) for l in range(layers)]:
      views, cpu_views = tuple(pool[l]), tuple(cpu_pool[l])
      got, want = readers[read](*views), readers[read](*cpu_views).clone()
      k = torch.randn(2, HEADS, HEAD_DIM)
      slots = torch.tensor([step, BLOCKS * BLOCK - 1 - l])
      compiled(views[0], k.to(device), slots.to(device))
      write(cpu_views[0], k, slots)
      reads.append((got, want))
    torch_xla.sync()
    for got, want in reads:
      torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
    torch.testing.assert_close(pool.cpu(), cpu_pool, rtol=0, atol=0)


if __name__ == '__main__':
  test = unittest.main()
  sys.exit(0 if test.result.wasSuccessful() else 1)
