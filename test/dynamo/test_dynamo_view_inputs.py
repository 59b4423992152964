"""torch.compile(backend='openxla') on inputs that are views of eager tensors.

Every test runs the same program compiled on XLA and eagerly on the CPU and
compares every tensor (bases, views, clones, outputs) after every step, with
and without `dynamo_set_buffer_donor_`. See pytorch/xla#8832 and
[Note: Graph inputs that are views] in torch_xla/_dynamo/view_inputs.py.
"""
import io
import logging
import os
import subprocess
import sys
import unittest
import unittest.mock

from absl.testing import absltest, parameterized
import torch
import torch._dynamo
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from torch_xla._dynamo import config as dynamo_config


def _donate(*tensors):
  for t in tensors:
    torch.ops.xla.dynamo_set_buffer_donor_(t, True)


def _values(*shape):
  return torch.arange(
      torch.Size(shape).numel(), dtype=torch.float32).reshape(shape) / 7


class ViewInputsTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    torch._dynamo.reset()

  def assert_matches_eager(self, fn, setup, steps=2, between=None):
    """Runs `fn(donate, *args)` compiled on XLA and eagerly on the CPU.

    `setup(device)` returns `(tensors, arg_names)`: every named tensor is
    compared after each step, and `arg_names` picks the arguments of `fn`.
    `between(tensors)`, if given, runs eagerly on both sides after each step.
    """
    for donate in (False, True):
      with self.subTest(donate=donate):
        torch._dynamo.reset()
        xla, xla_args = setup(torch_xla.device())
        cpu, cpu_args = setup('cpu')
        compiled = torch.compile(fn, backend='openxla')
        for step in range(steps):
          xla_out = compiled(donate, *[xla[n] for n in xla_args])
          cpu_out = fn(donate, *[cpu[n] for n in cpu_args])
          self.assert_same(xla, cpu, xla_out, cpu_out, f'step {step}')
          if between is not None:
            between(xla)
            between(cpu)
            self.assert_same(xla, cpu, None, None, f'after eager {step}')

  def assert_same(self, xla, cpu, xla_out, cpu_out, where):
    for name in cpu:
      torch.testing.assert_close(
          xla[name].cpu(),
          cpu[name],
          rtol=0,
          atol=0,
          msg=lambda m: f'{where}, {name}: {m}')
    if cpu_out is not None:
      xla_outs = xla_out if isinstance(xla_out, (tuple, list)) else [xla_out]
      cpu_outs = cpu_out if isinstance(cpu_out, (tuple, list)) else [cpu_out]
      self.assertEqual(len(xla_outs), len(cpu_outs))
      for i, (x, c) in enumerate(zip(xla_outs, cpu_outs)):
        torch.testing.assert_close(
            x.cpu(), c, msg=lambda m: f'{where}, output {i}: {m}')

  def test_reported_program(self):
    # The program from pytorch/xla#8832, verbatim but for the sizes.
    def write_to_kv_cache(key, value, key_cache, value_cache, slot_mapping):
      torch.ops.xla.dynamo_set_buffer_donor_(key_cache, True)
      torch.ops.xla.dynamo_set_buffer_donor_(value_cache, True)

      key = key.flatten(0, 2)
      value = value.flatten(0, 2)
      key_cache = key_cache.flatten(0, 2)
      value_cache = value_cache.flatten(0, 2)
      key_cache.index_copy_(0, slot_mapping, key)
      value_cache.index_copy_(0, slot_mapping, value)

    def setup(device):
      kv_cache = torch.zeros(2, 16, 8, 4, 32, device=device)
      key_cache, value_cache = kv_cache
      kv = _values(1, 3, 2, 4, 32).to(device)
      key, value = kv.unbind(dim=2)
      slot_mapping = torch.arange(12).to(device)
      return dict(
          kv_cache=kv_cache,
          key_cache=key_cache,
          value_cache=value_cache,
          key=key,
          value=value,
          slot_mapping=slot_mapping)

    xla, cpu = setup(torch_xla.device()), setup('cpu')
    args = ('key', 'value', 'key_cache', 'value_cache', 'slot_mapping')
    compiled = torch.compile(
        write_to_kv_cache, backend='openxla', fullgraph=False, dynamic=False)
    for step, fn in enumerate((compiled, compiled, write_to_kv_cache)):
      xla['key'].mul_(2)
      cpu['key'].mul_(2)
      fn(*[xla[n] for n in args])
      write_to_kv_cache(*[cpu[n] for n in args])
      self.assert_same(xla, cpu, None, None, f'step {step}')

  @parameterized.product(access=('read', 'write', 'both'), views=(1, 2))
  def test_donated_views_read_or_written(self, access, views):
    # Views that the function donates, read, written or both, alone or with
    # their sibling. The output has their base's shape: XLA may give it the
    # base's buffer if the base is donated but not written.
    def fn(donate, *args):
      out = []
      for view in args[:-1]:
        if donate:
          _donate(view)
        if access != 'read':
          view.add_(args[-1])
        if access != 'write':
          out.append(torch.stack([view, view]) * 2)
      return out

    def setup(device):
      base = _values(2, 4).to(device)
      names = [f'view{i}' for i in range(views)]
      tensors = dict(base=base, k=torch.ones(4).to(device))
      tensors.update((name, base[i]) for i, name in enumerate(names))
      return tensors, names + ['k']

    self.assert_matches_eager(fn, setup, steps=3)

  def test_view_changed_in_place_after_a_donating_call(self):
    # A view is stale after a call that donated its base, until it is
    # rebuilt; an in-place view op on it then, and a sync before it is read,
    # must not run on the donated buffer (nor on a value without one).
    def fn(donate, kc, vc, k):
      if donate:
        _donate(kc, vc)
      kc.add_(k)
      vc.add_(k * 2)

    def setup(device):
      cache = _values(2, 4, 3).to(device)
      kc, vc = cache
      return dict(
          cache=cache, kc=kc, vc=vc,
          k=torch.ones(4, 3).to(device)), ['kc', 'vc', 'k']

    def between(tensors):
      if tensors['vc'].dim() == 2:
        tensors['vc'].unsqueeze_(0)
      else:
        tensors['vc'].squeeze_(0)
      torch_xla.sync()

    self.assert_matches_eager(fn, setup, steps=3, between=between)

  def test_mode_and_options_reach_the_lifted_graph(self):
    # torch.compile's mode= and options= (transformers' CompileConfig passes
    # mode="reduce-overhead") go to the default backend with the lifted graph.
    device = torch_xla.device()
    x, kv = torch.arange(6.).reshape(2, 3), torch.zeros(2, 4, 3)
    xla_kv = kv.to(device)
    key, value = xla_kv

    def write(key, value, x):
      key[1:3] = x
      value[0:2] = -x
      return x * 2 + 1

    for kwargs in (dict(mode='reduce-overhead'), dict(mode='max-autotune'),
                   dict(options={'trace.enabled': False})):
      torch._dynamo.reset()
      out = torch.compile(
          write, backend='openxla', **kwargs)(key, value, x.to(device))
      torch.testing.assert_close(out.cpu(), write(*kv, x))
      torch.testing.assert_close(xla_kv.cpu(), kv)

  def test_unbind_views_index_copy(self):

    def fn(donate, k_cache, v_cache, k, v, slots):
      if donate:
        _donate(k_cache, v_cache)
      k_cache.index_copy_(0, slots, k)
      v_cache.index_copy_(0, slots, v)

    def setup(device):
      cache = torch.zeros(2, 10, 3, device=device)
      k_cache, v_cache = cache
      return dict(
          cache=cache,
          k_cache=k_cache,
          v_cache=v_cache,
          k=_values(2, 3).to(device),
          v=-_values(2, 3).to(device),
          slots=torch.tensor(
              [0, 9]).to(device)), ['k_cache', 'v_cache', 'k', 'v', 'slots']

    self.assert_matches_eager(fn, setup)

  def test_layers_as_views_of_one_allocation(self):

    def fn(donate, layer0, layer1, layer2, k, slots):
      for i, cache in enumerate((layer0, layer1, layer2)):
        if donate:
          _donate(cache)
        cache[0].index_copy_(0, slots, k * (i + 1))
        cache[1].index_copy_(0, slots, -k * (i + 1))

    def setup(device):
      pool = torch.zeros(3, 2, 6, 4, device=device)
      layers = {f'layer{i}': pool[i] for i in range(3)}
      return dict(
          layers,
          pool=pool,
          k=_values(2, 4).to(device),
          slots=torch.tensor([5, 1]).to(device)), list(layers) + ['k', 'slots']

    self.assert_matches_eager(fn, setup)

  def test_views_of_views(self):

    def fn(donate, a, b, c, x):
      if donate:
        _donate(a, b, c)
      a.add_(x.view(-1)[:a.numel()].view(a.shape))
      b.mul_(2)
      c.index_copy_(0, torch.tensor([1], device=c.device), x[:1, :1])

    def setup(device):
      base = _values(4, 6).to(device)
      a = base[0].view(2, 3)
      b = base[1:3].reshape(12)
      c = base[3].view(1, 6).flatten(0, 1).view(6, 1)
      return dict(
          base=base, a=a, b=b, c=c,
          x=_values(2, 6).to(device)), ['a', 'b', 'c', 'x']

    self.assert_matches_eager(fn, setup)

  def test_disjoint_slices_one_graph(self):

    def fn(donate, lo, hi, x):
      if donate:
        _donate(lo, hi)
      lo.add_(x)
      hi.sub_(x * 2)

    def setup(device):
      buf = _values(12).to(device)
      return dict(
          buf=buf, lo=buf[0:4], hi=buf[8:12],
          x=torch.ones(4).to(device)), ['lo', 'hi', 'x']

    self.assert_matches_eager(fn, setup)

  def test_transposed_view_index_copy(self):

    def fn(donate, t, src):
      if donate:
        _donate(t)
      t.index_copy_(0, torch.tensor([2, 0], device=t.device), src)

    def setup(device):
      base = _values(5, 3).to(device)
      return dict(
          base=base, t=base.t(), src=-_values(2, 5).to(device)), ['t', 'src']

    self.assert_matches_eager(fn, setup)

  def test_same_tensor_passed_twice(self):

    def fn(donate, a, b):
      if donate:
        _donate(a)
      a.add_(1)
      b.mul_(3)
      return a + b

    def setup(device):
      base = _values(2, 3).to(device)
      view = base[1]
      return dict(base=base, view=view), ['view', 'view']

    self.assert_matches_eager(fn, setup)

  def test_overlapping_slices(self):

    def fn(donate, a, b):
      if donate:
        _donate(a, b)
      a.add_(1)
      b.mul_(2)

    def setup(device):
      base = _values(12).to(device)
      return dict(base=base, a=base[0:8], b=base[4:12]), ['a', 'b']

    self.assert_matches_eager(fn, setup)

  def test_foreach_write_into_views_of_one_buffer(self):
    # A fake foreach op bumps no version counter: the fake run missed its
    # writes, and AOTAutograd failed on the aliased inputs.
    def fn(donate, a, b, c):
      if donate:
        _donate(a, b)
      torch._foreach_add_([a, b], 1.0)
      return c * 2

    def setup(device):
      base = _values(2, 3).to(device)
      a, b = base
      return dict(base=base, a=a, b=b, c=_values(3).to(device)), ['a', 'b', 'c']

    self.assert_matches_eager(fn, setup)

  def test_base_and_its_view(self):

    def fn(donate, base, row):
      if donate:
        _donate(row)
      row.fill_(-1)
      base.mul_(2)
      return base.sum()

    def setup(device):
      base = _values(3, 4).to(device)
      return dict(base=base, row=base[1]), ['base', 'row']

    self.assert_matches_eager(fn, setup)

  def test_compile_eager_compile_with_reads(self):

    def fn(donate, k, v, x):
      if donate:
        _donate(k, v)
      k.add_(x)
      v.index_copy_(0, torch.tensor([1], device=v.device), x[:1] * 5)

    def setup(device):
      cache = torch.zeros(2, 3, 4, device=device)
      k, v = cache.unbind(0)
      return dict(
          cache=cache, k=k, v=v, x=_values(3, 4).to(device)), ['k', 'v', 'x']

    def between(tensors):
      # Eager writes through the base and a view, and reads of both.
      tensors['cache'][1, 0].add_(100)
      tensors['k'].mul_(-1)
      tensors['x'].copy_(tensors['cache'][0] + tensors['v'])

    self.assert_matches_eager(fn, setup, steps=3, between=between)

  def test_full_overwrite_of_view(self):
    # Used to kill the process (pending IR of a view cleared to a placeholder).
    def fn(donate, v, d):
      if donate:
        _donate(v)
      v.copy_(d * -1)

    def setup(device):
      base = _values(2, 5).to(device)
      return dict(base=base, v=base[0], d=_values(5).to(device)), ['v', 'd']

    self.assert_matches_eager(fn, setup)

  def test_read_view_and_written_transpose(self):

    def fn(donate, a, b, x):
      if donate:
        _donate(b)
      b.add_(x)
      return a.sum() + b.sum()

    def setup(device):
      base = _values(4, 4).to(device)
      return dict(
          base=base,
          a=base.select(0, 2),
          b=base.transpose(0, 1),
          x=_values(4, 4).to(device)), ['a', 'b', 'x']

    self.assert_matches_eager(fn, setup)

  def test_clone_before_donated_call_unchanged(self):

    def fn(donate, k, x):
      if donate:
        _donate(k)
      k.add_(x)

    def setup(device):
      cache = _values(2, 3).to(device)
      k = cache[0]
      return dict(
          cache=cache,
          k=k,
          k_clone=k.clone(),
          cache_clone=cache.clone(),
          x=torch.ones(3).to(device)), ['k', 'x']

    self.assert_matches_eager(fn, setup)

  def test_outputs_are_views_of_mutated_inputs(self):

    def fn(donate, a, x):
      if donate:
        _donate(a)
      a.add_(x)
      return a[0], a.t(), a * 2

    def setup(device):
      base = _values(3, 2, 2).to(device)
      return dict(base=base, a=base[1], x=_values(2, 2).to(device)), ['a', 'x']

    self.assert_matches_eager(fn, setup)
    # The outputs alias the input as in eager: writing one writes the base.
    base = _values(3, 2, 2).to(torch_xla.device())
    compiled = torch.compile(lambda a: (a.add_(1), a[0])[1], backend='openxla')
    row = compiled(base[1])
    row.fill_(0)
    expected = _values(3, 2, 2)
    expected[1] += 1
    expected[1, 0] = 0
    torch.testing.assert_close(base.cpu(), expected)

  def test_under_no_grad_with_weights_that_require_grad(self):
    # Serving code runs under no_grad with parameters that require grad.
    def fn(donate, k, v, w):
      if donate:
        _donate(k, v)
      k.add_(w)
      v.sub_(w * 2)

    def setup(device):
      cache = torch.zeros(2, 3, 4, device=device)
      k, v = cache
      w = _values(3, 4).to(device).requires_grad_()
      return dict(cache=cache, k=k, v=v, w=w), ['k', 'v', 'w']

    with torch.no_grad():
      self.assert_matches_eager(fn, setup)

  def test_view_given_another_views_data(self):
    # `k.data = kv[1]` keeps `k`, its storage and its number of view ops: the
    # second call writes `kv[1]`, not `kv[0]` again.
    def fn(donate, k):
      if donate:
        _donate(k)
      k.add_(1)
      return k * 2

    def setup(device):
      kv = torch.zeros(3, 4, 3, device=device)
      return dict(kv=kv, k=kv[0]), ['k']

    moves = {}  # cache -> times `k` moved

    def between(tensors):
      kv = tensors['kv']
      moves[id(kv)] = moves.get(id(kv), 0) + 1
      tensors['k'].data = kv[moves[id(kv)] % 3]

    self.assert_matches_eager(fn, setup, steps=3, between=between)

  def test_views_made_under_inference_mode_are_refused(self):
    # inference_mode does not record views (`_base` is None): no path can
    # tell how such inputs alias, so they get a clear error, not wrong values.
    def fn(k, v):
      k.add_(1)
      v.add_(2)

    with torch.inference_mode():
      cache = torch.zeros(2, 3, device=torch_xla.device())
      k, v = cache
      with self.assertRaisesRegex(Exception, 'torch.inference_mode'):
        torch.compile(fn, backend='openxla')(k, v)

  @parameterized.parameters((False, True), (True, False), (True, True))
  def test_views_of_detached_aliases_and_of_the_base(self, requires_grad, grad):
    # `base.detach()[0]` is a view of `base.detach()`, not of `base` (not
    # lifted: "does not yet handle non-differentiable view input mutations");
    # its view ops start with the detach, so the graph rebuilds it from `base`,
    # detached as the caller's, with a second `detach()` and the base itself.
    def fn(donate, a, b, c, d, k):
      if donate:
        _donate(a, b)
      a.add_(k)
      b.index_copy_(0, torch.tensor([1], device=b.device), k[:1] * 3)
      c.mul_(2)
      return (d * k).sum()

    def setup(device):
      base = _values(3, 4).to(device).requires_grad_(requires_grad)
      detached = base.detach()
      with torch.no_grad():  # in grad mode, a view of a leaf is not written
        b = base.detach()[1] if requires_grad and grad else base[1]
      return dict(
          base=base,
          a=detached[0],
          b=b,
          c=base.detach().t()[2],
          k=torch.ones(4, device=device)), ['a', 'b', 'c', 'base', 'k']

    with torch.set_grad_enabled(grad):
      self.assert_matches_eager(fn, setup)

  def test_donated_aliases_without_views(self):
    # `base.detach().view(-1).detach()` beside `base`: no view among the
    # inputs, but one storage, written and donated: lifted, not left to the
    # default path.
    def write(flat, base, index, x):
      torch.ops.xla.dynamo_set_buffer_donor_(flat, True)
      torch.ops.xla.dynamo_set_buffer_donor_(base, True)
      flat.index_copy_(0, index, x)
      base.mul_(2)

    device = torch_xla.device()
    cpu = _values(4, 2, 2)
    xla = cpu.to(device)
    compiled = torch.compile(write, backend='openxla')
    for step in range(2):
      index, x = torch.tensor([step, 15]), _values(2) + step
      compiled(xla.detach().view(-1).detach(), xla, index.to(device),
               x.to(device))
      write(cpu.detach().view(-1).detach(), cpu, index, x)
      torch_xla.sync()
    torch.testing.assert_close(xla.cpu(), cpu, rtol=0, atol=0)


class ViewInputsDonationTest(unittest.TestCase):

  def setUp(self):
    torch._dynamo.reset()

  @staticmethod
  def write(k_cache, v_cache, k, v, slots):
    _donate(k_cache, v_cache)
    k_cache.index_copy_(0, slots, k)
    v_cache.index_copy_(0, slots, v)

  def make_cache(self):
    device = torch_xla.device()
    cache = torch.zeros(2, 64, 8, device=device)
    k, v = _values(4, 8).to(device), -_values(4, 8).to(device)
    slots = torch.tensor([3, 0, 63, 17]).to(device)
    torch_xla.sync()
    return cache, k, v, slots

  def test_no_recompilation(self):
    cache, k, v, slots = self.make_cache()
    compiled = torch.compile(self.write, backend='openxla')
    k_cache, v_cache = cache
    compiled(k_cache, v_cache, k, v, slots)
    xm.wait_device_ops()
    compiles = met.metric_data('CompileTime')[0]
    for _ in range(5):
      k_cache, v_cache = cache
      compiled(k_cache, v_cache, k, v, slots)
    xm.wait_device_ops()
    self.assertEqual(met.metric_data('CompileTime')[0], compiles)
    expected = torch.zeros(2, 64, 8)
    expected[0, [3, 0, 63, 17]] = _values(4, 8)
    expected[1, [3, 0, 63, 17]] = -_values(4, 8)
    torch.testing.assert_close(cache.cpu(), expected, rtol=0, atol=0)

  def test_donation_takes_effect(self):
    cache, k, v, slots = self.make_cache()
    compiled = torch.compile(self.write, backend='openxla')
    old_cache = torch_xla._XLAC._get_tensors_xla_device_data_node([cache])[1][0]
    met.clear_all()
    k_cache, v_cache = cache
    compiled(k_cache, v_cache, k, v, slots)
    xm.wait_device_ops()
    # The base's buffer, not a copy of the views, was donated and aliased.
    self.assertIn('Data Handle: Deleted',
                  torch_xla._XLAC._get_xla_tensor_debug_info(old_cache))
    self.assertGreaterEqual(met.counter_value('XlaSetBufferDonation'), 1)
    self.assertEqual(met.counter_value('DynamoLiftedGraph'), 1)
    self.assertEqual(met.metric_data('InputOutputAliasCount')[1], 1)
    # ... and nothing the user holds points at the deleted buffer.
    for t in (cache, k_cache, v_cache):
      self.assertNotIn('Data Handle: Deleted',
                       torch_xla._XLAC._get_xla_tensor_debug_info(t))
    expected = torch.zeros(2, 64, 8)
    expected[0, [3, 0, 63, 17]] = _values(4, 8)
    expected[1, [3, 0, 63, 17]] = -_values(4, 8)
    torch.testing.assert_close(cache.cpu(), expected, rtol=0, atol=0)
    torch.testing.assert_close(k_cache.cpu(), expected[0], rtol=0, atol=0)

  def test_views_taken_inside_the_function_are_donated(self):
    # A layer `pool[1]` passed in and split by the function, which donates
    # the halves: the pool is donated and written in place, not copied.
    _, k, v, slots = self.make_cache()
    pool = torch.zeros(3, 2, 64, 8, device=k.device)
    torch_xla.sync()
    old_pool = torch_xla._XLAC._get_tensors_xla_device_data_node([pool])[1][0]
    met.clear_all()
    torch.compile(
        lambda layer, *args: self.write(*layer, *args),
        backend='openxla')(pool[1], k, v, slots)
    xm.wait_device_ops()
    self.assertIn('Data Handle: Deleted',
                  torch_xla._XLAC._get_xla_tensor_debug_info(old_pool))
    self.assertEqual(met.metric_data('InputOutputAliasCount')[1], 1)
    expected = torch.zeros(3, 2, 64, 8)
    expected[1, 0, [3, 0, 63, 17]] = _values(4, 8)
    expected[1, 1, [3, 0, 63, 17]] = -_values(4, 8)
    torch.testing.assert_close(pool.cpu(), expected, rtol=0, atol=0)

  def test_layers_split_inside_in_a_loop(self):
    # Each layer of a pool passed in turn and split by the function, with a
    # pending eager read of the layer before each call: across a graph break
    # (each graph donating the halves it writes), and in calls under
    # inference_mode (the layer taken outside it, as XLA requires).
    def write(layer, k, slots):
      k_cache, v_cache = layer
      donate = _donate if k.is_xla else lambda *_: None
      donate(k_cache, v_cache)
      k_cache.index_copy_(0, slots, k)
      if mode == 'graph_break':
        torch._dynamo.graph_break()
        donate(k_cache, v_cache)
      v_cache.index_copy_(0, slots, -k)
      return k_cache[slots] + v_cache[:2]

    for mode in ('graph_break', 'inference_mode'):
      results = []
      for device in ('cpu', torch_xla.device()):
        torch._dynamo.reset()
        f = torch.compile(
            write, backend='openxla') if device != 'cpu' else write
        pool, seen = torch.zeros(3, 2, 16, 4, device=device), []
        for step in range(3):
          for l in (2, 0, 1):
            k = torch.full((2, 4), 10. * step + l + 1, device=device)
            slots = torch.tensor([step, 15 - l], device=device)
            layer, pending = pool[l], pool[l][1] * 2
            with torch.inference_mode(mode == 'inference_mode'):
              seen += [f(layer, k, slots), pending]
          if device != 'cpu':
            torch_xla.sync()
        results.append([pool.cpu()] + [t.cpu() for t in seen])
      for xla, cpu in zip(*reversed(results)):
        torch.testing.assert_close(
            xla, cpu, rtol=0, atol=0, msg=lambda m: f'{mode}: {m}')

  def test_donors_of_the_halves_of_a_layer_return_them(self):
    # As below, with the cache passed as a view and split by the function.
    def write(layer, k, v, slots):
      k_cache, v_cache = layer
      donor = torch.ops.xla.dynamo_set_buffer_donor_
      donor(k_cache, True).index_copy_(0, slots, k)
      return donor(v_cache, True).index_copy_(0, slots, v)[:2] * 2

    cache, k, v, slots = self.make_cache()
    out = torch.compile(write, backend='openxla')(cache[:], k, v, slots)
    expected = torch.zeros(2, 64, 8)
    expected[0, [3, 0, 63, 17]] = _values(4, 8)
    expected[1, [3, 0, 63, 17]] = -_values(4, 8)
    torch.testing.assert_close(cache.cpu(), expected, rtol=0, atol=0)
    torch.testing.assert_close(out.cpu(), expected[1, :2] * 2, rtol=0, atol=0)

  def test_donor_returns_its_view(self):
    # `dynamo_set_buffer_donor_` returns the view it is given, also where it
    # donates the view's base.
    def write(k_cache, v_cache, k, v, slots):
      donor = torch.ops.xla.dynamo_set_buffer_donor_
      donor(k_cache, True).index_copy_(0, slots, k)
      return donor(v_cache, True).index_copy_(0, slots, v)[:2] * 2

    expected = torch.zeros(2, 64, 8)
    expected[0, [3, 0, 63, 17]] = _values(4, 8)
    expected[1, [3, 0, 63, 17]] = -_values(4, 8)
    cache, k, v, slots = self.make_cache()
    out = torch.compile(write, backend='openxla')(*cache, k, v, slots)
    torch.testing.assert_close(cache.cpu(), expected, rtol=0, atol=0)
    torch.testing.assert_close(out.cpu(), expected[1, :2] * 2, rtol=0, atol=0)

  def test_views_keep_their_values_when_the_call_fails(self):
    # A call drops its views' values before its graph runs: if the graph
    # raises, they are read from their base again.
    from torch_xla._dynamo import view_inputs
    compiled = torch.compile(self.write, backend='openxla')
    compiled(*self.make_cache()[0], *self.make_cache()[1:])
    _, k, v, slots = self.make_cache()
    cache = _values(2, 64, 8).to(k.device)
    torch_xla.sync()
    expected = cache.cpu()
    k_cache, v_cache = cache
    with unittest.mock.patch.object(
        view_inputs.ViewInputsGraph,
        'call_lifted',
        side_effect=RuntimeError('the graph failed')):
      with self.assertRaisesRegex(RuntimeError, 'the graph failed'):
        compiled(k_cache, v_cache, k, v, slots)
    torch.testing.assert_close(k_cache.cpu(), expected[0], rtol=0, atol=0)
    torch.testing.assert_close(v_cache.cpu(), expected[1], rtol=0, atol=0)
    torch.testing.assert_close(cache.cpu(), expected, rtol=0, atol=0)


class LiftedViewsKeepBackendFeaturesTest(parameterized.TestCase):
  """What the default openxla path does must still work with view inputs."""

  def setUp(self):
    super().setUp()
    torch._dynamo.reset()

  def test_in_place_shape_change_of_a_view_input(self):

    def fn(a, b, c, d):
      b.add_(1)
      d.unsqueeze_(0)
      return a + c + d, b.view(-1)

    results = []
    for device in ('cpu', torch_xla.device()):
      x, y = _values(2, 4).to(device), _values(2, 4).to(device) + 10
      a, c = x
      b, d = y
      f = fn if device == 'cpu' else torch.compile(fn, backend='openxla')
      results.append([t.cpu() for t in f(a, b, c, d)] + [y.cpu(), d.cpu()])
    for xla, cpu in zip(results[1], results[0]):
      self.assertEqual(xla.shape, cpu.shape)
      torch.testing.assert_close(xla, cpu, rtol=0, atol=0)

  def test_returned_view_input_is_the_same_tensor(self):
    # Eager returns `v` itself; an in-place shape change of one shows on the
    # other, call after call, as the view's layout in its base changes.
    def fn(v, w):
      v.squeeze_(0) if v.dim() == 1 else v.unsqueeze_(0)
      w.mul_(2)
      return v

    results = []
    for device in ('cpu', torch_xla.device()):
      base = _values(5, 3, 3).to(device)
      v, w = base[:, 2, 2][0], base.view(45)
      f = fn if device == 'cpu' else torch.compile(fn, backend='openxla')
      outs = [f(v, w) for _ in range(3)]
      self.assertTrue(all(out is v for out in outs))
      results.append([out.cpu() for out in outs] + [base.cpu()])
    for xla, cpu in zip(results[1], results[0]):
      self.assertEqual(xla.shape, cpu.shape)
      torch.testing.assert_close(xla, cpu, rtol=0, atol=0)

  @parameterized.parameters(
      (torch.int32, 'setitem'),
      (torch.int64, 'setitem'),
      (torch.int64, 'index_copy'),
  )
  def test_out_of_range_pad_slots_are_dropped(self, dtype, write):
    # vLLM pads slot_mapping with out-of-range slots; XLA drops their rows.
    # The row arithmetic must not wrap: 2**20 * 4096 overflows int32.
    device = torch_xla.device()
    base = torch.zeros(2, 256, 2048, device=device)  # 4 MiB
    view = base[0][:, ::2] if write == 'setitem' else base[1]
    slots = torch.tensor([5, 1000, 1_000_000_000], dtype=dtype, device=device)

    def fn(view, slots, x):
      _donate(view)
      if write == 'setitem':
        view[slots] = x
      else:
        view.index_copy_(0, slots, x)

    x = _values(3, view.shape[1]).to(device)
    torch.compile(fn, backend='openxla')(view, slots, x)
    expected = torch.zeros(2, 256, 2048)
    if write == 'setitem':
      expected[0][5, ::2] = _values(3, 1024)[0]
    else:
      expected[1][5] = _values(3, 2048)[0]
    torch.testing.assert_close(base.cpu(), expected, rtol=0, atol=0)

  def test_op_that_falls_back_to_cpu(self):

    def fn(row, x):
      row.add_(1)
      return torch.linalg.eigvals(x).real.sum() + row.sum()

    results = []
    for device in ('cpu', torch_xla.device()):
      base = _values(3, 4).to(device)
      f = fn if device == 'cpu' else torch.compile(fn, backend='openxla')
      out = f(base[1], torch.eye(3, device=device) * 2)
      results.append((out.cpu(), base.cpu()))
    torch.testing.assert_close(results[1][0], results[0][0])
    torch.testing.assert_close(results[1][1], results[0][1], rtol=0, atol=0)

  def test_eager_buffer_donation_of_the_base(self):
    # The API upstream's test_dynamo_aliasing.py uses, on the views' base.
    device = torch_xla.device()
    cache = torch.ones(2, 4, device=device)
    clone = cache.clone()
    torch_xla.sync()
    self.assertTrue(torch_xla._XLAC._set_buffer_donation(cache, True))
    k, v = cache
    compiled = torch.compile(
        lambda k, v: (k.add_(1), v.add_(2)), backend='openxla')
    compiled(k, v)
    torch.testing.assert_close(cache.cpu(), torch.tensor([[2.] * 4, [3.] * 4]))
    torch.testing.assert_close(clone.cpu(), torch.ones(2, 4))

  def test_window_views_beyond_the_graph_cache(self):
    # Each window offset is a layout of its own: more of them than the cache
    # holds, revisited, stay right.
    device = torch_xla.device()
    cache = torch.zeros(1, 2, 12, 4, device=device)
    expected = torch.zeros(1, 2, 12, 4)

    def fn(window, x):
      _donate(window)
      window.copy_(x)

    compiled = torch.compile(fn, backend='openxla')
    size = dynamo_config.lifted_graph_cache_size
    dynamo_config.lifted_graph_cache_size = 4
    try:
      for p in list(range(12)) + [0, 11, 3]:
        x = torch.full((1, 2, 1, 4), float(p + 1))
        compiled(cache[:, :, p:p + 1], x.to(device))
        expected[:, :, p:p + 1] = x
        torch_xla.sync()
    finally:
      dynamo_config.lifted_graph_cache_size = size
    torch.testing.assert_close(cache.cpu(), expected, rtol=0, atol=0)

  def test_call_plans_leave_the_graph_in_use_cached(self):
    # Views taken again at every call find their layout's plan; with a cache
    # of 4, neither they nor their layouts push out the graph every call runs.
    device = torch_xla.device()
    pool = torch.zeros(2, 2, 8, 4, device=device)
    expected = torch.zeros(2, 2, 8, 4)

    def fn(k, v, i, x):
      _donate(k, v)
      k.index_copy_(0, i, x)
      v.index_copy_(0, i, x * 2)

    compiled = torch.compile(fn, backend='openxla')
    size = dynamo_config.lifted_graph_cache_size
    dynamo_config.lifted_graph_cache_size = 4
    try:
      for step in range(6):
        for layer in range(2):
          x = torch.full((1, 4), float(step + layer + 1))
          k, v = pool[layer]
          compiled(k, v, torch.tensor([step]).to(device), x.to(device))
          expected[layer, 0, step], expected[layer, 1, step] = x[0], 2 * x[0]
          if (step, layer) == (1, 1):
            met.clear_counters()  # the graph for all layers is made
        torch_xla.sync()
    finally:
      dynamo_config.lifted_graph_cache_size = size
    torch.testing.assert_close(pool.cpu(), expected, rtol=0, atol=0)
    self.assertIsNone(met.counter_value('DynamoLiftedGraph'))
    self.assertIsNone(met.counter_value('DynamoLiftedGraphEvicted'))

  def test_grad_mode_with_running_stats_in_one_buffer(self):
    # BatchNorm-style running statistics kept as views of one flat buffer,
    # updated under no_grad in a graph whose weight requires grad.
    def fn(x, w, mean, var):
      y = x @ w
      with torch.no_grad():
        mean.mul_(0.9).add_(y.mean(0) * 0.1)
        var.mul_(0.9).add_(y.var(0) * 0.1)
      return (y - y.mean(0)).pow(2).sum()

    results = []
    for device in ('cpu', torch_xla.device()):
      w = _values(4, 4).to(device).requires_grad_()
      buf = torch.zeros(8, device=device)
      mean, var = buf[:4].view(4), buf[4:].reshape(4)
      x = _values(3, 4).to(device) - 1
      f = fn if device == 'cpu' else torch.compile(fn, backend='openxla')
      for _ in range(2):
        loss = f(x, w, mean, var)
        loss.backward()
      results.append([loss.detach().cpu(), w.grad.cpu(), buf.cpu()])
    for xla, cpu in zip(results[1], results[0]):
      torch.testing.assert_close(xla, cpu)

  def test_batch_norm_running_stats_in_one_buffer(self):
    # `aten.native_batch_norm`'s schema does not mark the running statistics
    # it writes; AOTAutograd's decomposition of it does. The running variance
    # is XLA's (of the biased variance): eager XLA on two tensors gives it.
    bn = torch.nn.BatchNorm1d(3)
    functional = lambda x, mean, var: torch.nn.functional.batch_norm(
        x, mean, var, training=True)

    def module(x, mean, var):
      bn.running_mean, bn.running_var = mean, var
      return bn(x)

    for fn in (functional, module):
      results = []
      for device, views in (('cpu', True), (torch_xla.device(), False),
                            (torch_xla.device(), True)):
        torch._dynamo.reset()
        bn.to(device)
        stats = torch.stack([torch.zeros(3), torch.ones(3)]).to(device)
        mean, var = stats.unbind(0) if views else [s.clone() for s in stats]
        x = _values(8, 3).to(device).sin()
        f = torch.compile(
            fn, backend='openxla') if views and str(device) != 'cpu' else fn
        outs = [f(x, mean, var).cpu() for _ in range(2)]
        results.append([*outs, mean.cpu(), var.cpu(), stats.cpu()])
      cpu, xla_eager, compiled = results
      for got, expected in zip(compiled[:3], cpu[:3]):
        torch.testing.assert_close(got, expected)
      torch.testing.assert_close(compiled[3], xla_eager[3])
      torch.testing.assert_close(compiled[4], torch.stack(compiled[2:4]))

  def test_lifting_can_be_turned_off(self):
    met.clear_all()
    device = torch_xla.device()
    base = torch.zeros(2, 3, device=device)
    dynamo_config.lift_view_inputs = False
    try:
      out = torch.compile(lambda v: v + 1, backend='openxla')(base[1])
    finally:
      dynamo_config.lift_view_inputs = True
    torch.testing.assert_close(out.cpu(), torch.ones(3))
    self.assertIsNone(met.counter_value('DynamoLiftedGraph'))

  def test_debug_output_says_why_a_graph_is_lifted_or_not(self):
    out = _run_in_subprocess(
        self, """
import torch, torch_xla
base = torch.zeros(2, 3).to('xla')
a, b = base
torch.compile(lambda a, b: (a.add_(1), b.add_(2)), backend='openxla')(a, b)
torch.compile(lambda a, b, out: out.add_(a * b), backend='openxla')(
    a, b, torch.zeros(3).to('xla'))
torch.compile(lambda a, b: a + b, backend='openxla')(a, b)
""", {'XLA_DYNAMO_DEBUG': '1'})
    lines = [l for l in out.splitlines() if l.startswith('openxla view inputs')]
    self.assertRegex(lines[0], r': 1 base\(s\) lifted for LiftPlan')
    self.assertEqual(lines[1:], [
        'openxla view inputs: aliased views only read, or a lone view: '
        'default path',
        'openxla view inputs: no input written or donated: default path'
    ])

  def test_torch_without_the_view_meta_api_keeps_the_default_path(self):
    # torch 2.8 has no torch._C._functionalization: torch_xla imports, says
    # once why views are not lifted, and compiles as without this series.
    out = _run_in_subprocess(
        self, """
import torch
del torch._C._functionalization
import torch_xla
x = torch.zeros(3).to('xla')
print(torch.compile(lambda x: x + 1, backend='openxla')(x).cpu().tolist())
""", {'XLA_DYNAMO_DEBUG': '1'})
    self.assertEqual(out.count('torch has no torch._C._functionalization'), 1)
    self.assertIn('[1.0, 1.0, 1.0]', out)


class ViewAttributesTest(parameterized.TestCase):
  """Graph attributes that are views (`mark_static_address`, as transformers'
  StaticCache marks its layers) are lifted as inputs are."""

  def setUp(self):
    super().setUp()
    torch._dynamo.reset()

  def test_static_address_counter_beside_view_inputs(self):
    # transformers' StaticCache marks its tensors (and a step counter) static.
    device = torch_xla.device()
    counter = torch.zeros(1, device=device)
    torch._dynamo.mark_static_address(counter)
    cache = torch.zeros(2, 3, device=device)
    k, v = cache

    def fn(k, v):
      counter.add_(1)
      k.add_(counter)
      v.mul_(2)

    compiled = torch.compile(fn, backend='openxla')
    for _ in range(3):
      compiled(k, v)
    self.assertEqual(counter.item(), 3)
    torch.testing.assert_close(cache.cpu(), torch.tensor([[6.] * 3, [0.] * 3]))

  def test_static_address_views_of_one_allocation(self):
    # Layer caches that are views of one pool, marked static as StaticLayer
    # does, become graph attributes rather than inputs; they are lifted too.
    def make(device):
      pool = torch.zeros(2, 2, 3, device=device)
      return pool, [pool[0], pool[1]]

    pool, layers = make(torch_xla.device())
    for layer in layers:
      torch._dynamo.mark_static_address(layer)
    cpu_pool, cpu_layers = make('cpu')

    def fn(layers, x):
      layers[0].add_(x)
      layers[1].index_copy_(0, torch.tensor([1], device=x.device), x[:1] * 3)
      return layers[0].sum() + layers[1].sum()

    compiled = torch.compile(lambda x: fn(layers, x), backend='openxla')
    for step in range(3):
      x = _values(2, 3) + step
      out = compiled(x.to(torch_xla.device()))
      expected = fn(cpu_layers, x)
      torch.testing.assert_close(out.cpu(), expected)
      torch.testing.assert_close(pool.cpu(), cpu_pool, rtol=0, atol=0)

  def test_static_address_view_read_beside_a_written_view_input(self):
    # A view attribute only read, of the base of a view input that is written
    # and donated: lifted with it, so it reads its own element of the base.
    def make(device):
      base = torch.arange(8.).reshape(2, 4).to(device)
      return base, base.narrow(1, 2, 1), base.view(8).unbind(0)[4]

    base, written, read = make(torch_xla.device())
    torch._dynamo.mark_static_address(read)
    cpu_base, cpu_written, cpu_read = make('cpu')

    def fn(written, read, x):
      torch.ops.xla.dynamo_set_buffer_donor_(written, True)
      written.add_(x)
      return written.sum() + read.sum()

    compiled = torch.compile(lambda w, x: fn(w, read, x), backend='openxla')
    for step in range(2):
      x = torch.full((2, 1), -3.0 + step)
      out = compiled(written, x.to(torch_xla.device()))
      torch.testing.assert_close(out.cpu(), fn(cpu_written, cpu_read, x))
      torch.testing.assert_close(base.cpu(), cpu_base, rtol=0, atol=0)

  def test_static_address_base_beside_its_view_passed_in(self):
    # A static base is a graph attribute, its view an input, both written:
    # the base is lifted with its view, as the same input.
    def make(device):
      base = torch.zeros(2, 4, 2, device=device)
      return base, base.unbind(0)[1]

    base, view = make(torch_xla.device())
    torch._dynamo.mark_static_address(base)
    cpu_base, cpu_view = make('cpu')

    def fn(base, view, x):
      base.copy_(x * -1)
      view.mul_(3.0)
      base[torch.tensor([0], device=x.device)] = x[:1] + 3

    compiled = torch.compile(lambda v, x: fn(base, v, x), backend='openxla')
    for step in range(2):
      x = _values(2, 4, 2) + step
      compiled(view, x.to(torch_xla.device()))
      fn(cpu_base, cpu_view, x)
      torch.testing.assert_close(base.cpu(), cpu_base, rtol=0, atol=0)
      torch.testing.assert_close(view.cpu(), cpu_view, rtol=0, atol=0)

  def test_static_address_view_changing_shape(self):
    # Dynamo guards a static-address tensor by identity only: after a view of
    # it changed shape in place, the graph is compiled for its new shape, as
    # eager runs it (without this, "output with shape [3] doesn't match the
    # broadcast shape [1, 3]"), or, if it cannot run on it, the call raises.
    for name, fn in (('sum', lambda v: v.add_(1).sum()),
                     ('index', lambda v: v.add_(1)[0, 1])):
      with self.subTest(fn=name):
        torch._dynamo.reset()
        view = torch.zeros(2, 1, 3, device=torch_xla.device())[0]
        cpu_view = torch.zeros(2, 1, 3)[0]
        torch._dynamo.mark_static_address(view)
        compiled = torch.compile(lambda: fn(view), backend='openxla')
        torch.testing.assert_close(compiled().cpu(), fn(cpu_view))
        view.squeeze_(0)
        cpu_view.squeeze_(0)
        if name == 'index':
          with self.assertRaisesRegex(NotImplementedError,
                                      'changed shape in place'):
            compiled()
          continue
        torch.testing.assert_close(compiled().cpu(), fn(cpu_view))
        torch.testing.assert_close(view.cpu(), cpu_view)

  def test_static_address_views_of_one_base_one_changing_shape(self):
    # After `squeeze_` on one of two static views of one base, the graph for
    # the new shape lifts them as the first one did.
    def fn():
      a.add_(1)
      b.mul_(2)
      return (a * b).sum()

    results = []
    for device in ('cpu', torch_xla.device()):
      base = _values(2, 1, 3).to(device)
      a, b = base[0], base[1]
      torch._dynamo.reset()
      if device != 'cpu':
        torch._dynamo.mark_static_address(a)
        torch._dynamo.mark_static_address(b)
      f = torch.compile(fn, backend='openxla') if device != 'cpu' else fn
      outs = [f()]
      a.squeeze_(0)
      outs += [f(), f()]
      results.append([t.cpu() for t in outs + [base]])
    for xla, cpu in zip(*reversed(results)):
      torch.testing.assert_close(xla, cpu)


def _run_in_subprocess(test, code, env):
  """Runs `code` in a new process (for settings read at start-up)."""
  result = subprocess.run([sys.executable, '-c', code],
                          env=dict(os.environ, **env),
                          capture_output=True,
                          text=True)
  test.assertEqual(result.returncode, 0, result.stderr[-3000:])
  return result.stdout


class DefaultPathTest(parameterized.TestCase):
  """Only aliased inputs with a write or a donation are lifted; what the
  default path of torch_xla runs right stays right (pytorch/xla#8832)."""

  def setUp(self):
    super().setUp()
    torch._dynamo.reset()

  def test_graphs_without_writes_are_compiled_as_they_are(self):
    # Nothing of ours runs in their calls: the default backend's own function.
    from torch_xla._dynamo import view_inputs
    gm = torch.fx.symbolic_trace(lambda a, b: a + b)
    compiled = object()
    example = [torch.zeros(2, device=torch_xla.device())] * 2
    self.assertIs(
        view_inputs.compile_view_inputs(gm, example, lambda m, e: compiled),
        compiled)

  def test_views_are_planned_once_not_at_every_call(self):
    # Where a view lies in its base is replayed at its first call only.
    from torch_xla._dynamo import view_inputs
    replayed, replay = [], view_inputs._replay

    def counting_replay(view, base):
      replayed.append(view.shape)
      return replay(view, base)

    base = torch.zeros(2, 3, device=torch_xla.device())
    a, b = base
    compiled = torch.compile(
        lambda a, b: (a.add_(1), b.add_(2)), backend='openxla')
    with unittest.mock.patch.object(view_inputs, '_replay', counting_replay):
      for _ in range(3):
        compiled(a, b)
    # Two views, each planned once and rebuilt once in the lifted graph.
    self.assertEqual(len(replayed), 4)
    torch.testing.assert_close(base.cpu(), torch.tensor([[3.] * 3, [6.] * 3]))

  def test_fresh_views_of_one_layout_find_its_plan(self):
    # A call's plan is kept by the layout of its arguments, not by which
    # tensors they are: fresh views of fresh bases, as a decode step passes,
    # are planned at the first call; another layout is planned again.
    compiled = torch.compile(
        lambda a, b: (a.add_(1), b.add_(2)), backend='openxla')
    planned = []
    for row in (0, 0, 0, 1):
      base = torch.zeros(3, 3, device=torch_xla.device())
      met.clear_all()
      compiled(base[row], base[2])
      planned.append(met.counter_value('DynamoViewInputsPlan'))
      expected = torch.zeros(3, 3)
      expected[row] += 1
      expected[2] += 2
      torch.testing.assert_close(base.cpu(), expected)
    self.assertEqual(planned, [1, None, None, 1])

  def test_dynamic_sizes_are_not_specialized(self):
    # The fake run that finds the writes adds no guard to Dynamo's shapes
    # (it used to specialize the batch size of a multi-head reshape): one
    # graph for all batch sizes, as without views.
    def fn(x, w, buf):
      buf.add_(1)
      heads = (x @ w).view(x.shape[0], x.shape[1], 2, 2).transpose(1, 2)
      return heads.sum((1, 2)) + buf

    compiled = torch.compile(fn, backend='openxla', dynamic=True)
    torch._dynamo.utils.counters.clear()
    device = torch_xla.device()
    w, buf, cpu_buf = _values(4, 4), torch.zeros(
        1, device=device), torch.zeros(1)
    for batch in (2, 3, 4, 5):
      x = _values(batch, 3, 4)
      out = compiled(x.to(device), w.to(device), buf)
      torch.testing.assert_close(out.cpu(), fn(x, w, cpu_buf))
    self.assertEqual(torch._dynamo.utils.counters['stats']['unique_graphs'], 1)

  def test_dynamic_sizes_beside_a_lone_view(self):
    # A graph with a written input and a lone view, which keeps the default
    # path: compiled in Dynamo's context, its sizes stay symbolic.
    def fn(buf, view, tok):
      buf.narrow(0, 0, tok.size(0)).add_(tok)
      return view.sum() + buf.sum()

    compiled = torch.compile(fn, backend='openxla', dynamic=True)
    device = torch_xla.device()
    buf, cpu_buf = torch.zeros(16, device=device), torch.zeros(16)
    base = _values(2, 4)
    view = base.to(device)[1]
    for n in (8, 9, 10):
      tok = _values(n)
      out = compiled(buf, view, tok.to(device))
      torch.testing.assert_close(out.cpu(), fn(cpu_buf, base[1], tok))
      torch.testing.assert_close(buf.cpu(), cpu_buf)

  def test_dynamic_sizes_beside_read_only_aliased_views(self):
    # Aliased views keep the graph's default path out of Dynamo's context (their
    # overlap guards fail on XLA): it is compiled at the call for its sizes,
    # once per sizes.
    def fn(buf, a, b, tok):
      buf.narrow(0, 0, tok.size(0)).add_(tok)
      return (a * b).sum() + buf.sum()

    compiled = torch.compile(fn, backend='openxla', dynamic=True)
    device = torch_xla.device()
    buf, cpu_buf = torch.zeros(16, device=device), torch.zeros(16)
    base = _values(2, 4)
    a, b = base.to(device).unbind(0)
    for n in (3, 2, 3, 5):
      tok = _values(n)
      out = compiled(buf, a, b, tok.to(device))
      torch.testing.assert_close(out.cpu(), fn(cpu_buf, base[0], base[1], tok))
      torch.testing.assert_close(buf.cpu(), cpu_buf)

  def test_read_only_aliased_views_take_the_default_path(self):

    def fn(a, b, out):
      out.add_(a * b)

    device = torch_xla.device()
    base, out = _values(2, 4).to(device), torch.zeros(4, device=device)
    a, b = base
    compiled = torch.compile(fn, backend='openxla')
    for _ in range(2):
      met.clear_all()
      compiled(a, b, out)
    self.assertIsNone(met.counter_value('DynamoLiftedGraph'))
    self.assertEqual(met.counter_value('DynamoViewInputsDefaultPath'), 1)
    expected = _values(2, 4)
    torch.testing.assert_close(out.cpu(), expected[0] * expected[1] * 2)

  def test_views_that_require_grad_unlike_their_base_under_no_grad(self):
    # One view kept out of the group would be written over by its sibling.
    def fn(a, b, i, s):
      a.index_copy_(0, i, s)
      b.index_copy_(0, i, s + 10)

    device = torch_xla.device()
    base = torch.zeros(2, 4, device=device)
    with torch.no_grad():
      a, b = base[0], base[1]
    b.requires_grad_()
    with torch.no_grad():
      torch.compile(
          fn, backend='openxla')(a, b, torch.tensor([1], device=device),
                                 torch.ones(1, device=device))
    torch.testing.assert_close(base.cpu(),
                               torch.tensor([[0., 1, 0, 0], [0, 11, 0, 0]]))

  @parameterized.parameters(False, True)
  def test_base_transposed_in_place_before_the_call(self, write):
    # A view of a base after `base.t_()` starts its ViewMeta sequence with the
    # base's own `t`, which the replay must not apply twice.
    def fn(a, b):
      if write:
        a.mul_(2)
        b.add_(1)
      return a * 1 + b

    results = []
    for device in ('cpu', torch_xla.device()):
      base = torch.arange(16.).view(4, 4).clone().to(device)
      base.t_()
      f = torch.compile(fn, backend='openxla') if device != 'cpu' else fn
      out = f(base[0], base[2])
      results.append([out.cpu(), base.cpu()])
    for xla, cpu in zip(*reversed(results)):
      torch.testing.assert_close(xla, cpu, rtol=0, atol=0)

  def test_base_transposed_in_place_between_calls(self):
    # A call is planned again when a tensor's ViewMeta sequence has changed,
    # the base's included: views taken before `base.t_()` cannot be rebuilt
    # from it, which is said, not reused from the first call's plan.
    def fn(a, b):
      a.mul_(2)
      b.add_(1)

    base = torch.arange(16.).view(4, 4).to(torch_xla.device())
    a, b = base[0], base[2]
    compiled = torch.compile(fn, backend='openxla')
    compiled(a, b)
    base.t_()
    with self.assertRaisesRegex(NotImplementedError, 'pass the base'):
      compiled(a, b)

  def test_donated_view_of_a_strided_base_that_requires_grad(self):
    # AOTAutograd writes a leaf that requires grad through an alias, under
    # no_grad: the base, itself a view of its storage after `as_strided_`,
    # is left on the donated buffer until synced.
    def fn(v):
      _donate(v)
      v.mul_(3)

    results = []
    for device in ('cpu', torch_xla.device()):
      base = torch.arange(8.).view(4, 2).to(device)
      base.as_strided_((3, 2), (2, 1), 2)
      base.requires_grad_()
      f = torch.compile(fn, backend='openxla') if device != 'cpu' else fn
      with torch.no_grad():
        for _ in range(2):
          f(base.view(6)[3])
          torch_xla.sync()
        v = base.view(6)[3]
        torch_xla.sync()
      results.append([base.detach().cpu(), v.cpu()])
    for xla, cpu in zip(*reversed(results)):
      torch.testing.assert_close(xla, cpu, rtol=0, atol=0)

  def test_views_made_under_inference_mode_only_read(self):
    with torch.inference_mode():
      t = _values(2, 8, 4)
      k, v = t.to(torch_xla.device()).unbind(0)
      out = torch.compile(lambda k, v: (k * v).sum(), backend='openxla')(k, v)
    torch.testing.assert_close(out.cpu(), (t[0] * t[1]).sum())

  def test_views_written_in_calls_under_inference_mode(self):
    # Views of a normal tensor, taken outside inference mode and written in
    # calls under it (a lone view, and views that alias one another, donated
    # or not): the base sees the writes, as on CPU. XLA takes no view of a
    # normal tensor in inference mode: the call runs outside it.
    def write(a, b, donate):
      if donate and a.device.type == 'xla':
        torch.ops.xla.dynamo_set_buffer_donor_(a, True)
      a.add_(1)
      b.mul_(2)
      return a + b

    for donate in (False, True):
      results = []
      for device in ('cpu', torch_xla.device()):
        base = torch.arange(8.).view(2, 4).to(device)
        a, b = base.unbind(0)
        lone = torch.compile(lambda a: a.add_(1), backend='openxla')
        f = torch.compile(write, backend='openxla')
        lone, f = (lambda a: a.add_(1), write) if device == 'cpu' else (lone, f)
        with torch.inference_mode():
          for _ in range(2):
            lone(a)
            out = f(a, b, donate)
        results.append([base.cpu(), out.cpu()])
      for xla, cpu in zip(*reversed(results)):
        torch.testing.assert_close(xla, cpu, rtol=0, atol=0)

  def test_retain_grad_and_hooks_on_view_inputs(self):
    grads = []
    results = []
    for device in ('cpu', torch_xla.device()):
      p = _values(2, 4).to(device).requires_grad_()
      h = p * 1
      a, b = h[0], h[1]
      a.retain_grad()
      b.register_hook(lambda g: grads.append(g.cpu()))
      f = (lambda a, b: (a * b).sum())
      if device != 'cpu':
        f = torch.compile(f, backend='openxla')
      f(a, b).backward()
      results.append([a.grad.cpu(), p.grad.cpu()])
    for xla, cpu in zip(*reversed(results)):
      torch.testing.assert_close(xla, cpu)
    torch.testing.assert_close(grads[1], grads[0])

  def test_hooked_views_written_in_grad_mode_are_refused(self):
    p = _values(2, 4).to(torch_xla.device()).requires_grad_()
    h = p * 1
    a, b = h[0], h[1]
    a.retain_grad()
    with self.assertRaisesRegex(Exception, 'hooks, retain_grad'):
      torch.compile(lambda a, b: a.mul_(b), backend='openxla')(a, b)

  def test_returned_written_view_is_the_input(self):
    base = _values(16).to(torch_xla.device())
    x = base.view(4, 4)
    out = torch.compile(
        lambda x, y: x.add_(y),
        backend='openxla')(x, torch.ones(4, 4, device=torch_xla.device()))
    self.assertIs(out, x)
    torch.testing.assert_close(base.cpu(), _values(16) + 1)

  def test_detached_alias_that_requires_grad_is_refused(self):
    # Its grads flow to the alias, not to the base the graph would take.
    base = torch.zeros(2, 4, device=torch_xla.device())
    with self.assertRaisesRegex(NotImplementedError, 'pass the base'):
      torch.compile(
          lambda a, b: (b.add_(2), a * 2),
          backend='openxla')(base.detach().requires_grad_()[0], base[1])

  def test_detached_aliases_only_read(self):

    def fn(a, b):
      return a + b

    base = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    out = torch.compile(
        fn, backend='openxla')(base.to(torch_xla.device())[:2].detach(),
                               base.to(torch_xla.device())[2:].detach())
    torch.testing.assert_close(out.cpu(), base[:2] + base[2:])

  @parameterized.parameters('sync', 'sync_at_end', 'graph_break', 'dynamic')
  def test_views_taken_again_every_step(self, mode):
    # The reported program in a loop: after each call the base has a new
    # buffer, and the views it took, still pending, are re-pointed at it.
    def write(kc, vc, k, idx):
      _donate(kc, vc)
      kc.index_copy_(0, idx, k)
      if mode == 'graph_break':
        torch._dynamo.graph_break()
      vc.index_copy_(0, idx, -k)

    device = torch_xla.device()
    compiled = torch.compile(
        write, backend='openxla', dynamic=mode == 'dynamic')
    cache, expected = torch.zeros(
        2, 16, 4, device=device), torch.zeros(2, 16, 4)
    torch_xla.sync()
    for step in range(6):
      kc, vc = cache
      tokens = 1 + step % 3 if mode == 'dynamic' else 1
      k = torch.full((tokens, 4), float(step + 1))
      idx = torch.arange(tokens) + 2 * step
      compiled(kc, vc, k.to(device), idx.to(device))
      expected[0].index_copy_(0, idx, k)
      expected[1].index_copy_(0, idx, -k)
      if mode != 'sync_at_end':
        torch_xla.sync()
    torch_xla.sync()
    torch.testing.assert_close(cache.cpu(), expected, rtol=0, atol=0)
    torch.testing.assert_close(kc.cpu(), expected[0], rtol=0, atol=0)

  def test_views_of_a_pool_taken_every_step_for_each_layer(self):
    # Every layer's view of one pool taken at the start of a step, then one
    # donating call a layer: the views written by earlier calls are pending
    # on buffers that later calls donate.
    def write(layer, k, idx):
      _donate(layer)
      layer[0].index_copy_(0, idx, k)
      layer[1].index_copy_(0, idx, -k)

    device = torch_xla.device()
    pool, expected = torch.zeros(
        8, 2, 16, 4, device=device), torch.zeros(8, 2, 16, 4)
    compiled = torch.compile(write, backend='openxla')
    torch_xla.sync()
    for step in range(4):
      layers = list(pool)
      for l, layer in enumerate(layers):
        k, idx = torch.full((1, 4), float(step * 10 + l)), torch.tensor([step])
        compiled(layer, k.to(device), idx.to(device))
        expected[l, 0].index_copy_(0, idx, k)
        expected[l, 1].index_copy_(0, idx, -k)
      torch_xla.sync()
    torch.testing.assert_close(pool.cpu(), expected, rtol=0, atol=0)
    torch.testing.assert_close(layers[3].cpu(), expected[3], rtol=0, atol=0)

  def test_repeated_and_overlapping_views_with_dynamic_shapes(self):
    # PyTorch's own AOTAutograd tests, on XLA.
    def twice(x, y):
      x.add_(1)
      y.add_(1)

    def overlapping(t0, t1, s0, s1):
      return t0.add_(s0), t1.add_(s1)

    for device in ('cpu', torch_xla.device()):
      base = torch.ones(10, device=device)
      view = base[1:]
      f = twice if device == 'cpu' else torch.compile(
          twice, backend='openxla', dynamic=True)
      f(view, view)
      torch.testing.assert_close(base.cpu(), torch.tensor([1.] + [3.] * 9))
    results = []
    for device in ('cpu', torch_xla.device()):
      t = _values(8).to(device)
      f = overlapping if device == 'cpu' else torch.compile(
          overlapping, backend='openxla', dynamic=True)
      outs = f(t, t[1:-1], 2, 2)
      results.append([o.cpu() for o in outs] + [t.cpu()])
    for xla, cpu in zip(*reversed(results)):
      torch.testing.assert_close(xla, cpu, rtol=0, atol=0)

  def test_evicted_computations_are_compiled_again(self):
    # XLA's LRU cache of computations holds 16 here: revisited windows of a
    # cache whose lifted graphs it evicted compile again (without this, they
    # fail with "Failed to get computation by hash").
    out = _run_in_subprocess(
        self, """
import torch, torch_xla
import torch_xla.debug.metrics as met
cache, expected = torch.zeros(1, 2, 24, 4).to('xla'), torch.zeros(1, 2, 24, 4)
def write(window, x):  # not rows at an offset: a graph per window
  torch.ops.xla.dynamo_set_buffer_donor_(window, True)
  window.add_(x - window)
f = torch.compile(write, backend='openxla')
recompiled = 0
for p in list(range(20)) + list(range(20)):
  x = torch.full((1, 2, 1, 4), float(p + 1))
  f(cache[:, :, p:p + 1], x.to('xla'))
  expected[:, :, p:p + 1] = x
  torch_xla.sync()
  recompiled += met.counter_value('DynamoLiftedGraphRecompiled') or 0
  met.clear_counters()
print(torch.equal(cache.cpu(), expected), recompiled > 0)
""", {'XLA_COMPILATION_CACHE_SIZE': '16'})
    self.assertEqual(out.split()[-2:], ['True', 'True'])

  def test_lifted_graphs_are_logged_under_their_frame(self):
    # A lifted graph is compiled at its first call, under Dynamo's compile id.
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(torch._logging._internal.TorchLogsFormatter())
    logger = logging.getLogger('torch._functorch._aot_autograd')
    logger.addHandler(handler)
    torch._logging.set_logs(aot_graphs=True)
    try:
      base = torch.zeros(2, 3, device=torch_xla.device())
      a, b = base
      torch.compile(
          lambda a, b: (a.add_(1), b.add_(2)), backend='openxla')(a, b)
    finally:
      torch._logging.set_logs()
      logger.removeHandler(handler)
    # AOTAutograd's graph takes the base (2, 3), not the views (3,).
    self.assertRegex(
        stream.getvalue(),
        r'\[0/0\] \[__aot_graphs\] +def forward\(self, arg0_1: '
        r'"f32\[2, 3\]')


if __name__ == '__main__':
  test = unittest.main()
  sys.exit(0 if test.result.wasSuccessful() else 1)
