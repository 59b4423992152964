"""Eager tensors pending on a buffer that a compiled call donates
(pytorch/xla#8832, "Inconsistent output when mixing eager with
torch.compile").

An eager op computed before the call from the donated tensor (its base, a
view, a clone, a product) holds the values from before the call, as on CPU,
and the next sync does not fail on a deleted buffer.
"""
import itertools
import sys
import unittest

from absl.testing import parameterized
import torch
import torch._dynamo
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

_READERS = dict(
    view_product=lambda cache, kc, vc: kc * 2,
    base_product=lambda cache, kc, vc: cache * 2,
    view_clone=lambda cache, kc, vc: kc.clone(),
    base_clone=lambda cache, kc, vc: cache.clone(),
    sibling_view=lambda cache, kc, vc: vc,
    view_of_view=lambda cache, kc, vc: kc[1:3],
)


def _donate(*tensors):
  for t in tensors:
    if t.device.type == 'xla':
      torch.ops.xla.dynamo_set_buffer_donor_(t, True)


def _write(kc, vc, k, idx):
  _donate(kc, vc)
  kc.index_copy_(0, idx, k)
  vc.index_copy_(0, idx, -k)


def _write_keys(kc, k, idx):
  _donate(kc)
  kc.index_copy_(0, idx, k)


class PendingReadsTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    torch._dynamo.reset()
    met.clear_all()

  def check(self, xla, cpu, what):
    self.assertTrue(
        torch.equal(xla.cpu(), cpu), f'{what}: {xla.cpu()} != {cpu}')

  def executions(self):
    xm.wait_device_ops()
    return (met.metric_data('ExecuteTime') or [0])[0]

  def warm_up(self, compiled, keys_only=False):
    """A first call compiles the graph and runs it as traced, donating
    nothing: the calls under test run the compiled graph."""
    cache, k, idx = self.inputs(torch_xla.device())
    args = tuple(cache)[:1 if keys_only else 2]
    compiled(*args, k, idx)
    torch_xla.sync()

  def inputs(self, device):
    cache = torch.arange(36.).reshape(2, 6, 3).to(device)
    k = torch.full((2, 3), 100.).to(device)
    idx = torch.tensor([0, 2]).to(device)
    return cache, k, idx

  @parameterized.named_parameters(_READERS.items())
  def test_read_before_a_donated_write(self, reader):
    device = torch_xla.device()
    for keys_only, synced_views in itertools.product((False, True), repeat=2):
      with self.subTest(keys_only=keys_only, synced_views=synced_views):
        write = _write_keys if keys_only else _write
        compiled = torch.compile(write, backend='openxla')
        self.warm_up(compiled, keys_only)
        (cache, k, idx), (ref, ref_k, ref_idx) = (self.inputs(device),
                                                  self.inputs('cpu'))
        if synced_views:
          kc, vc = cache
        torch_xla.sync()
        if not synced_views:
          kc, vc = cache
        read = reader(cache, kc, vc)
        compiled(*((kc,) if keys_only else (kc, vc)), k, idx)
        ref_kc, ref_vc = ref
        want = reader(ref, ref_kc, ref_vc)  # views see the write
        write(*((ref_kc,) if keys_only else (ref_kc, ref_vc)), ref_k, ref_idx)
        torch_xla.sync()
        self.check(read, want, 'the eager read')
        self.check(cache, ref, 'the cache')

  def test_clone_between_calls_with_metrics_cleared(self):
    # A clone shares its source's buffer until a sync and needs no
    # computation; the call sees that the base was read, whatever the metrics
    # say.
    device = torch_xla.device()
    compiled = torch.compile(_write, backend='openxla')
    self.warm_up(compiled)
    (cache, k, idx), (ref, ref_k, ref_idx) = (self.inputs(device),
                                              self.inputs('cpu'))
    kc, vc = cache
    torch_xla.sync()
    met.clear_all()
    compiled(kc, vc, k, idx)
    _write(*ref, ref_k, ref_idx)
    clone, want = cache.clone(), ref.clone()
    met.clear_all()
    compiled(kc, vc, k * 2, idx)
    _write(*ref, ref_k * 2, ref_idx)
    torch_xla.sync()
    self.check(clone, want, 'the clone')
    self.check(cache, ref, 'the cache')

  def test_reads_between_calls_of_a_decoder_loop(self):
    # Attention scores read each layer's keys eagerly before the next step
    # writes them; kept, they show the keys of their step.
    device = torch_xla.device()
    compiled = torch.compile(_write, backend='openxla')
    self.warm_up(compiled)
    pool, ref = torch.zeros(3, 2, 6, 3, device=device), torch.zeros(3, 2, 6, 3)
    q = torch.ones(3)
    torch_xla.sync()
    scores, want = [], []
    for step in range(3):
      for l in range(3):
        k = torch.full((2, 3), 10. * step + l)
        idx = torch.tensor([step, 5 - step])
        scores.append(pool[l][0] @ q.to(device))
        want.append(ref[l][0] @ q)
        compiled(*pool[l], k.to(device), idx.to(device))
        _write(*ref[l], k, idx)
    torch_xla.sync()
    for i, (got, expected) in enumerate(zip(scores, want)):
      self.check(got, expected, f'scores {i}')
    self.check(pool, ref, 'the pool')

  def test_calls_back_to_back_execute_once(self):
    # Views kept across calls: one execution a call. A pending read of a
    # fresh view costs one more.
    device = torch_xla.device()
    compiled = torch.compile(_write, backend='openxla')
    cache, k, idx = self.inputs(device)
    kc, vc = cache
    torch_xla.sync()
    compiled(kc, vc, k, idx)
    compiled(kc, vc, k, idx)
    executions = self.executions()
    for _ in range(5):
      compiled(kc, vc, k, idx)
    self.assertEqual(self.executions(), executions + 5)
    kc, vc = cache
    read = cache * 1
    compiled(kc, vc, k, idx)
    self.assertEqual(self.executions(), executions + 7)
    self.check(read, cache.cpu(), 'the eager read')


if __name__ == '__main__':
  test = unittest.main(exit=False)
  sys.exit(0 if test.result.wasSuccessful() else 1)
