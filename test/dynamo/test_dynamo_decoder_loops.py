"""Decoder loops: one compiled function called on each layer's views of one
KV-cache pool, step after step (pytorch/xla#8832).

Every test runs the same program on CPU tensors eagerly and compares the
pool and each call's output with it after every call (or every step, or at
the end, as the program syncs), for each way a model calls the function:
two views a call (the report's `write(key_cache, value_cache, ...)`) or
one, views kept or taken again at every call, through any chain of view
ops, donated or not, in any layer order.
"""
import random
import sys
import unittest

from absl.testing import parameterized
import torch
import torch._dynamo
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

LAYERS, SLOTS, DIM = 3, 8, 4


def _donate(*tensors):
  for t in tensors:
    if t.device.type == 'xla':
      torch.ops.xla.dynamo_set_buffer_donor_(t, True)


def _kv_write(donate):

  def write(kc, vc, k, idx):
    if donate:
      _donate(kc, vc)
    kc.index_copy_(0, idx, k)
    vc.index_copy_(0, idx, -k)
    return kc.sum() - vc[0].sum()

  return write


def _layer_write(donate):

  def write(layer, k, idx):
    if donate:
      _donate(layer)
    layer[0].index_copy_(0, idx, k)
    layer[1].index_copy_(0, idx, -k)
    return layer[0].sum() - layer[1, 0].sum()

  return write


def _keys_write(donate):

  def write(kc, k, idx):
    if donate:
      _donate(kc)
    kc.index_copy_(0, idx, k)
    return kc.sum()

  return write


_WRITES = dict(kv=_kv_write, layer=_layer_write, k=_keys_write)

_CHAINS = dict(
    unbind=lambda layer: tuple(layer),
    select=lambda layer: (layer[0], layer[1]),
    index=lambda layer: (layer[:][0], layer[:][1]),
    narrow=lambda layer: tuple(layer.narrow(0, 0, 2).unbind(0)),
)


def _take(pool, l, views, chain):
  """The views of layer `l` that a function of `views` takes."""
  if views == 'layer':
    return (pool[l],)
  kc, vc = _CHAINS[chain](pool[l])
  return (kc, vc) if views == 'kv' else (kc,)


def _order(order, layers):
  if order == 'reversed':
    return list(reversed(range(layers)))
  if order == 'shuffled':
    return random.Random(layers).sample(range(layers), layers)
  return list(range(layers))


def _grid():
  for views in ('kv', 'layer', 'k'):
    for take in ('once', 'step'):
      for chain in (('unbind',) if views == 'layer' else
                    ('unbind', 'select', 'index')):
        for donate in (True, False):
          for sync in ('call', 'step', 'end'):
            name = f'{views}_{take}_{chain}_{"donated" if donate else "kept"}'
            yield dict(
                testcase_name=f'{name}_sync_{sync}',
                views=views,
                take=take,
                chain=chain,
                donate=donate,
                sync=sync)


class DecoderLoopsTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    torch._dynamo.reset()
    met.clear_all()

  def compiles(self):
    xm.wait_device_ops()
    return (met.metric_data('CompileTime') or [0])[0]

  def check(self, xla, cpu, what):
    self.assertTrue(
        torch.equal(xla.cpu(), cpu), f'{what}: {xla.cpu()} != {cpu}')

  def loop(self,
           views='kv',
           take='once',
           chain='unbind',
           donate=True,
           sync='call',
           order='forward',
           layers=LAYERS,
           steps=3,
           fn=None,
           inference=False):
    """Calls the write of `views` on each layer of one pool for `steps`
    steps (under inference mode with `inference`); returns the compilations
    after the first step."""
    fn = fn or _WRITES[views](donate)
    compiled = torch.compile(fn, backend='openxla')
    device = torch_xla.device()
    pool = torch.zeros(layers, 2, SLOTS, DIM, device=device)
    ref = torch.zeros(layers, 2, SLOTS, DIM)
    kept = [(_take(pool, l, views, chain), _take(ref, l, views, chain))
            for l in range(layers)]
    torch_xla.sync()
    first = None
    with torch.inference_mode(inference):
      for step in range(steps):
        for l in _order(order, layers):
          xla_views, cpu_views = kept[l] if take == 'once' else (_take(
              pool, l, views, chain), _take(ref, l, views, chain))
          k = torch.full((2, DIM), 10. * step + l + 1)
          idx = torch.tensor([step % SLOTS, SLOTS - 1 - l % SLOTS])
          out = compiled(*xla_views, k.to(device), idx.to(device))
          want = fn(*cpu_views, k, idx)
          if sync == 'call':
            torch_xla.sync()
            self.check(pool, ref, f'pool after step {step}, layer {l}')
          self.check(out, want, f'output of step {step}, layer {l}')
        if sync == 'step':
          torch_xla.sync()
        if first is None:
          first = self.compiles()
    torch_xla.sync()
    self.check(pool, ref, 'pool at the end')
    return self.compiles() - first

  @parameterized.named_parameters(*_grid())
  def test_grid(self, **cfg):
    self.loop(**cfg)

  @parameterized.parameters('forward', 'reversed', 'shuffled')
  def test_layer_order(self, order):
    for views in ('kv', 'k'):
      for take in ('once', 'step'):
        torch._dynamo.reset()
        self.loop(views=views, take=take, order=order, layers=5)

  @parameterized.parameters('kv', 'layer', 'k')
  def test_calls_under_inference_mode(self, views):
    # The pool and its views made outside inference mode, the calls under it,
    # as serving code runs a model.
    for donate in (True, False):
      torch._dynamo.reset()
      self.loop(views=views, donate=donate, inference=True)

  def test_two_views_a_call_compile_once(self):
    # From the second layer on one graph takes each view's offset.
    self.assertEqual(self.loop(layers=8, steps=2), 0)
    self.assertEqual(met.counter_value('DynamoLiftedGraphForOffsets'), 1)

  def test_narrow_then_unbind(self):
    for take in ('once', 'step'):
      torch._dynamo.reset()
      self.loop(chain='narrow', take=take)

  def test_keys_only_returning_nothing(self):

    def write(kc, k, idx):
      _donate(kc)
      kc.index_copy_(0, idx, k)

    device = torch_xla.device()
    compiled = torch.compile(write, backend='openxla')
    pool, ref = torch.zeros(
        4, 2, SLOTS, DIM, device=device), torch.zeros(4, 2, SLOTS, DIM)
    keys = [(pool[l][0], ref[l][0]) for l in range(4)]
    torch_xla.sync()
    for step in range(3):
      for l, (kc, cpu_kc) in enumerate(keys):
        k = torch.full((2, DIM), 10. * step + l + 1)
        idx = torch.tensor([step, SLOTS - 1 - l])
        compiled(kc, k.to(device), idx.to(device))
        write(cpu_kc, k, idx)
      torch_xla.sync()
      self.check(pool, ref, f'pool after step {step}')

  def test_sibling_taken_each_step_not_passed(self):
    # `kc, vc = pool[2 * l], pool[2 * l + 1]` each step, only kc passed and
    # donated: vc, pending, reads the pool after the call as eager does.
    device = torch_xla.device()
    write = _keys_write(True)
    compiled = torch.compile(write, backend='openxla')
    pool, ref = torch.zeros(
        6, SLOTS, DIM, device=device), torch.zeros(6, SLOTS, DIM)
    torch_xla.sync()
    for step in range(3):
      for l in range(3):
        kc, vc = pool[2 * l], pool[2 * l + 1]
        k = torch.full((2, DIM), 10. * step + l + 1)
        idx = torch.tensor([step, SLOTS - 1 - l])
        out = compiled(kc, k.to(device), idx.to(device))
        self.check(out, write(ref[2 * l], k, idx), f'step {step}, layer {l}')
        self.check(vc, ref[2 * l + 1], f'sibling of layer {l}')
        self.check(pool, ref, f'pool after step {step}, layer {l}')
    # A call with views taken once before the loop runs one execution.
    kept = pool[0]
    torch_xla.sync()
    compiled(kept, k.to(device), idx.to(device))
    xm.wait_device_ops()
    executions = met.metric_data('ExecuteTime')[0]
    compiled(kept, k.to(device), idx.to(device))
    xm.wait_device_ops()
    self.assertEqual(met.metric_data('ExecuteTime')[0], executions + 1)

  def test_returned_view_of_a_donated_view_attribute(self):
    # A global view, donated and written, returns a view of itself. That
    # output is pending on the buffer that the second call donates; the third
    # call, after an eager write, must not fail.
    device = torch_xla.device()
    views = [torch.arange(96.).reshape(2, 3, 4, 1, 4).to(device).select(0, 1)]

    def fn(x):
      _donate(views[0])
      views[0].add_(x)
      return views[0][0]

    compiled, x = torch.compile(fn, backend='openxla'), torch.ones(3, 4, 1, 4)
    outs = [compiled(x.to(device)), compiled(x.to(device))]
    views[0].add_(1)
    outs.append(compiled(x.to(device)))
    got = views[0]
    views = [torch.arange(96.).reshape(2, 3, 4, 1, 4).select(0, 1)]
    want = [fn(x), fn(x)]
    views[0].add_(1)
    want.append(fn(x))
    torch_xla.sync()
    for i, (out, expected) in enumerate(zip(outs, want)):
      self.check(out, expected, f'output {i}')
    self.check(got, views[0], 'the view')

  def test_32_layers_6d_pool(self):
    # The report's write on a 6-D pool (layers, k/v, blocks, block, heads,
    # dim), 32 layers, every order; one compilation for all layers.
    layers, shape = 32, (4, 2, 2, 4)
    write = _kv_write(True)

    def vllm(kc, vc, k, slots):
      _donate(kc, vc)
      kc.flatten(0, 1).index_copy_(0, slots, k)
      vc.flatten(0, 1).index_copy_(0, slots, -k)
      return kc.sum() - vc[0].sum()

    device = torch_xla.device()
    compiled = torch.compile(vllm, backend='openxla')
    pool = torch.zeros(layers, 2, *shape, device=device)
    ref = torch.zeros(layers, 2, *shape)
    kept = [(tuple(pool[l]), tuple(ref[l])) for l in range(layers)]
    torch_xla.sync()
    for step, order in enumerate(('forward', 'reversed', 'shuffled')):
      for l in _order(order, layers):
        k = torch.full((3, 2, 4), 100. * step + l)
        slots = torch.tensor([step, 7 - step, (l * 3) % 8])
        out = compiled(*kept[l][0], k.to(device), slots.to(device))
        self.check(out, vllm(*kept[l][1], k, slots), f'layer {l}')
        if step == 0 and l == 1:
          first = self.compiles()
      torch_xla.sync()
      self.check(pool, ref, f'pool after step {step}')
    self.assertEqual(self.compiles(), first)

  @parameterized.parameters('index_copy', 'slice')
  def test_static_cache_pool(self, how):
    # StaticCache-like layers of one pool (layers, k/v, batch, heads, len,
    # dim), written at a position along dim 2.
    layers, shape = 4, (2, 2, 8, 4)

    def write(kc, vc, k, pos):
      _donate(kc, vc)
      if how == 'index_copy':
        kc.index_copy_(2, pos, k)
        vc.index_copy_(2, pos, -k)
      else:
        kc[:, :, 3:5] = k
        vc[:, :, 3:5] = -k
      return (kc * vc).sum()

    device = torch_xla.device()
    compiled = torch.compile(write, backend='openxla')
    pool = torch.zeros(layers, 2, *shape, device=device)
    ref = torch.zeros(layers, 2, *shape)
    for step in range(3):
      for l in _order('shuffled', layers):
        k = torch.full((2, 2, 2, 4), 10. * step + l + 1)
        pos = torch.tensor([step, 7 - l])
        out = compiled(*pool[l], k.to(device), pos.to(device))
        self.check(out, write(*ref[l], k, pos), f'step {step}, layer {l}')
      torch_xla.sync()
      self.check(pool, ref, f'pool after step {step}')

  def test_write_and_read_interleaved(self):
    # A write and a read (attention over the layer) compiled apart, called
    # in turn on each layer, and an eager read of the layer between calls.
    write = _kv_write(True)

    def read(kc, vc, q):
      return torch.softmax(q @ kc.T, -1) @ vc

    device = torch_xla.device()
    cw, cr = (torch.compile(f, backend='openxla') for f in (write, read))
    pool, ref = torch.zeros(
        LAYERS, 2, SLOTS, DIM,
        device=device), torch.zeros(LAYERS, 2, SLOTS, DIM)
    kept = [(tuple(pool[l]), tuple(ref[l])) for l in range(LAYERS)]
    torch_xla.sync()
    for step in range(3):
      for l in range(LAYERS):
        k = torch.full((2, DIM), 10. * step + l + 1)
        idx = torch.tensor([step, SLOTS - 1 - l])
        q = torch.arange(2. * DIM).reshape(2, DIM) / 8
        cw(*kept[l][0], k.to(device), idx.to(device))
        write(*kept[l][1], k, idx)
        out = cr(*kept[l][0], q.to(device))
        eager = kept[l][0][1] * 2
        torch_xla.sync()
        torch.testing.assert_close(out.cpu(), read(*kept[l][1], q))
        self.check(eager, kept[l][1][1] * 2, f'eager read {step}, {l}')
      self.check(pool, ref, f'pool after step {step}')

  def test_graph_break(self):

    def write(kc, vc, k, idx):
      _donate(kc, vc)
      kc.index_copy_(0, idx, k)
      torch._dynamo.graph_break()
      vc.index_copy_(0, idx, -k)
      return vc.sum()

    for take in ('once', 'step'):
      torch._dynamo.reset()
      self.loop(take=take, fn=write)

  def test_dynamic_token_counts(self):

    def write(kc, vc, k, idx):
      _donate(kc, vc)
      kc.index_copy_(0, idx, k)
      vc.index_copy_(0, idx, -k)
      return kc.sum() - vc.sum()

    device = torch_xla.device()
    compiled = torch.compile(write, backend='openxla', dynamic=True)
    pool, ref = torch.zeros(
        LAYERS, 2, SLOTS, DIM,
        device=device), torch.zeros(LAYERS, 2, SLOTS, DIM)
    torch_xla.sync()
    for step, tokens in enumerate((1, 3, 2, 3)):
      for l in range(LAYERS):
        k = torch.full((tokens, DIM), 10. * step + l + 1)
        idx = torch.randperm(
            SLOTS,
            generator=torch.Generator().manual_seed(step * 10 + l))[:tokens]
        out = compiled(*pool[l], k.to(device), idx.to(device))
        self.check(out, write(*ref[l], k, idx), f'step {step}, layer {l}')
      torch_xla.sync()
      self.check(pool, ref, f'pool after step {step}')


if __name__ == '__main__':
  test = unittest.main(exit=False)
  sys.exit(0 if test.result.wasSuccessful() else 1)
