#!/usr/bin/env python3
"""Differential fuzzer: torch.compile(backend="openxla") on views, on stock
torch_xla and on the series, each compared with CPU eager.

Each program, made from a seed, takes one or two bases, random view chains on
them (select, narrow, unbind, transpose, t, flatten, view), passes some views
(sometimes a base, or the same view twice) to a compiled function `fn` that
writes them in place (add_, mul_, fill_, copy_, index_copy_ on any dim,
index_put_, slice and tensor-key assignment), may mark them with
dynamo_set_buffer_donor_, returns nothing, a reduction or views, and runs a
few steps with eager writes and reads between.  After every step every tensor
(bases, views, clones, outputs as out{step}_{i}, grads, what hooks saw) is
compared with the same program run eagerly on the CPU, values and
requires_grad.  Families, each chosen per program by the seed (--families
picks those that may be):
  rows      KV caches (paged 4-D and 5-D, a (2, 1, H, S, D) static cache)
            written by whole rows: `flatten(0, 1).index_copy_(0, slots, k)`,
            `index_copy_(2, pos, k)`, `c[:, :, p:p+n] = k`, copy_;
  static    bases or views marked with mark_static_address, read by fn as
            globals or as attributes of `model`, and a counter fn increments;
  meta      unsqueeze_/squeeze_/t_/transpose_ on a view between calls or in
            fn, undoing itself when run again;
  index     int32/int64 indices, negative ones, and vLLM's pad slots (past the
            end: XLA drops them; the CPU run drops them itself, `in_range`);
  grad      a loss from a weight that requires grad, the writes under
            no_grad (BatchNorm's running stats), backward(), w.grad compared;
  outputs   views of intermediates returned (`out0.view(-1), out0`,
            `*out0.unbind(0)`, ...), views of inputs beside them; one output
            written in place after each call;
  dynamic   torch.compile(dynamic=True), or (maybe_)mark_dynamic: tokens
            whose count changes between calls written into a view (slice,
            narrow, index_copy_), views marked dynamic;
  reqgrad   everything under no_grad, requires_grad_() on some views or
            bases but not on their siblings;
  basemeta  t_, transpose_, unsqueeze_, squeeze_, as_strided_ (on a
            contiguous base) on the bases before their views are taken;
  inference tensors made and calls run under torch.inference_mode() (or the
            calls only);
  hooks     register_hook and retain_grad on views of a leaf that requires
            grad, passed to fn; the grads and what the hooks saw compared;
  setitem   assignment whose source broadcasts: leading unit dims, fewer
            dims, python scalars, 0-d tensors;
  overlap   two overlapping narrows of one tensor written and read across,
            the same view passed twice, with or without dynamic=True;
  viewkinds expand (read only), diagonal, narrow, detach() and
            view(torch.int32) (written as bits) among the chains;
  retake    the views taken again after each call, torch_xla.sync() after
            each step or only at the end (then compared only there), a graph
            break (graph_break() or .item()) between two writes in fn, and
            an eager clone or product of a view still pending when a call
            donates its base;
  loops     a decoder's loop over the layers of one KV pool: one fn called on
            the views of each layer in turn (LOOP), for 1 to 3 decode steps,
            the pool (L, 2, S, D) written by index_copy_ or index_put, (L, 2,
            blocks, block, D) by `kc.flatten(0, 1).index_copy_(0, slots, k)`,
            (L, 2, 1, H, S, D) by `kc[:, :, p:p + 1] = k` or index_copy_(2,
            pos, k); fn takes two views (`write(key_cache, value_cache, k, v,
            idx)`, from `kc, vc = pool[l]`, `pool[l, 0], pool[l, 1]`,
            `pool[l][0], pool[l][1]`, `pool[l].narrow(0, 0, 2).unbind(0)`), the
            keys only, or the layer `pool[l]` it splits; views kept from before
            the loop or taken again before each call, donated or not (a layer,
            or the halves fn splits off); layers forward, reversed or shuffled
            each step; a sync after each call, each decode step or only at the
            end (then compared only after those); a second compiled fn2 reading
            the layer just written (`q @ kc.T`, softmax @ vc), an eager read of
            a layer synced before the next call. It has no other family but
            index (pad slots) and, drawn apart from them, leaves the other
            programs as they were; with --families loops (or loops,index) every
            program has it.
  ops       an op of PyTorch's OpInfo database (op_db), one of its float32
            samples: its in-place variant applied to a view `base[1]` or to
            both views of `base.unbind(0)` (donated or not), or its out=
            variant writing into `base[1]`; ops XLA runs on the CPU among
            them. Ops whose result CPU eager does not give the same under
            another random seed are left out.
  flat      training steps over a weight and a bias that are views of one
            flat buffer: torch.optim's SGD (momentum), Adam, AdamW, RMSprop
            (foreach or not) stepping them, _foreach_mul_/_foreach_add_ by
            hand, an EMA of them in views of the same buffer, or gradients
            copied into a bucket's views (donated or not) and the bucket
            averaged; an eager read of the buffer between steps.
            ops and flat are drawn apart, as loops, with no other family.

Every program runs on both builds, each in a --worker child process (with
the environment `tools/apply_and_test.sh [--unpatched] --run` gives); its
verdict (and per build: ok, mismatch, error, unsupported, dead, invalid):
  ok          ok on both;
  fixed       not ok on stock, ok on the series: ok, or the series' clear
              NotImplementedError ('torch.compile(backend="openxla")...');
  regression  ok on stock, not ok on the series (an exception, that
              NotImplementedError, or a death);
  silent      a silent mismatch on the series, unless stock's is the same;
  both        not ok on both: the series raising or dying, or the same
              mismatch as stock's (the same tensor, by as much);
  xla         not ok on both, and not ok run eagerly on XLA either (fn not
              compiled, nothing donated): a limit of XLA's eager ops, not of
              the compiled path (e.g. "Cannot set version_counter for
              inference tensor": a view of a normal tensor taken in
              inference mode);
  limit       a regression of the documented limit: an eager read of a view
              still pending when a call donates its base fails at sync
              ('... is deleted') on the series, which donates the base, and
              not on stock, which never donates through a view (as stock
              fails for a plain donated tensor read while pending), and the
              program without that read is ok on the series;
  pytorch     PyTorch's own compiler on CPU, torch.compile(backend=
              "aot_eager"), raises or differs from CPU eager: not a valid
              program for any backend (e.g. a ConstraintViolationError);
  invalid     CPU eager itself raised: a bug of this fuzzer.
A child runs programs one after another in a process forked from one that
imported torch_xla, and after a program that is not ok forks a new one: no
program runs after a failure in the same process.  Regressions, silent
mismatches and invalid programs are printed as standalone scripts, shrunk to
the fewest statements that fail the same way on the build that fails, then
run alone on both builds.  A markdown table gives the verdicts per family.

  tools/fuzz_views.py --count 300 --json /tmp/fuzz.json  # about 40 min
  tools/fuzz_views.py --long                  # 2000 programs
  tools/fuzz_views.py --show 7                # a program, standalone
  (tools/apply_and_test.sh --run python tools/fuzz_views.py ... also works)
The checkouts are apply_and_test.sh's, in its cache: with
APPLY_AND_TEST_CACHE=DIR, no other run re-points them during this one (a
warning says if they moved).
"""
import argparse
import collections
import concurrent.futures
import functools
import json
import math
import os
import random
import re
import select
import signal
import subprocess
import sys
import threading
import time
import types

HARNESS = '''
import contextlib
import types

import torch
import torch_xla

DONATE = torch.ops.xla.dynamo_set_buffer_donor_
PAD = 1_000_000_000  # vLLM's pad slot: out of range, XLA drops the write


class Model:
  """fn reads the STATIC tensors as attributes of `model` (or globals)."""


model = Model()


def values(*shape):
  return torch.arange(torch.Size(shape).numel(),
                      dtype=torch.float32).reshape(shape) / 7 - 1


def op_sample(name, i):
  """ops: OpInfo `name` (op_db's name.variant) and its i-th float32 sample
  on the CPU, the same in every process."""
  from torch.testing._internal.common_methods_invocations import op_db
  op = next(o for o in op_db if f'{o.name}.{o.variant_test_name}' == name)
  torch.manual_seed(0)
  return op, list(op.sample_inputs('cpu', torch.float32))[i]


def in_range(view, dim, index, src):
  """XLA drops writes at out-of-range indices; CPU eager raises: the CPU
  run drops them (and their rows of src) itself."""
  if view.device.type != 'cpu':
    return index, src
  keep = (index >= -view.shape[dim]) & (index < view.shape[dim])
  return index[keep], src[(slice(None),) * dim + (keep,)]


def compare(step, xla, cpu):
  for name, expected in cpu.items():
    got, where = xla[name], f'MISMATCH after {step}: {name}'
    if isinstance(expected, list):  # what a hook saw
      if len(got) != len(expected):
        raise AssertionError(f'{where}: {len(got)} calls, not {len(expected)}')
      pairs = zip(got, expected)
    elif isinstance(expected, torch.Tensor):
      pairs = [(got, expected)]
    else:
      if (got is None) != (expected is None):
        raise AssertionError(f'{where} is {got!r}, not {expected!r}')
      continue
    for got, expected in pairs:
      if got.requires_grad != expected.requires_grad:
        raise AssertionError(f'{where}: requires_grad={got.requires_grad}')
      got, expected = got.detach().cpu(), expected.detach()
      if got.shape != expected.shape or got.dtype != expected.dtype:
        raise AssertionError(f'{where}: {got.dtype}{list(got.shape)}, not '
                             f'{expected.dtype}{list(expected.shape)}')
      if not torch.allclose(got, expected, 1e-5, 1e-5, equal_nan=True):
        diff = (got.double() - expected.double()).abs().max().item()
        raise AssertionError(f'{where} differs from CPU eager ({diff})')


def call(f, args, state, step, calls):
  for name in STATIC:
    globals()[name] = state[name]
    setattr(model, name, state[name])
  layer = LOOP[calls] if LOOP else None  # loops: the layer of this call
  with torch.enable_grad() if GRADS else contextlib.nullcontext():
    out = f(*[state[n.format(call=calls, layer=layer)] for n in args])
  outs = out if isinstance(out, tuple) else () if out is None else (out,)
  if GRADS:
    outs[0].backward()
    for name in GRADS:
      state[f'{name}_grad'] = state[name].grad
  with torch.no_grad():
    after(outs)
  for i, out in enumerate(outs):
    state[f'out{step}_{i}'] = out


def reference(f, *args, by='CPU eager'):
  try:
    return f(*args)
  except Exception as e:
    raise AssertionError(f'INVALID program: {by} raised {e!r}') from e


def aot_eager(f):
  """What PyTorch itself compiles, on CPU: a program it fails or gets wrong
  is invalid. A code object of its own: Dynamo caches graphs per code."""
  f = types.FunctionType(f.__code__.replace(), f.__globals__, f.__name__,
                         f.__defaults__, f.__closure__)
  return torch.compile(f, backend='aot_eager', dynamic=DYNAMIC)


def openxla(f):
  """`f` compiled for XLA, or `f` itself for the eager XLA reference."""
  return torch.compile(f, backend='openxla', dynamic=DYNAMIC) if COMPILE else f


def run():
  if not COMPILE:  # eager XLA: donation is a hint to compiled graphs only
    globals()['DONATE'] = lambda tensor, donate: tensor
  with torch.inference_mode(INFERENCE == 'all'), torch.set_grad_enabled(
      not NOGRAD):
    xla, cpu, aot = setup(torch_xla.device()), setup('cpu'), setup('cpu')
  compiled = openxla(fn)
  compiled_aot = aot_eager(fn)
  if 'compiled2' in STEPS:  # loops: fn2 reads what the last call wrote
    compiled2 = openxla(fn2)
    compiled2_aot = aot_eager(fn2)
  by = 'CPU aot_eager'
  with torch.inference_mode(bool(INFERENCE)), torch.set_grad_enabled(
      not NOGRAD):
    for step, kind in enumerate(STEPS):
      if kind == 'compiled':
        calls = STEPS[:step].count('compiled')
        reference(call, fn, ARGS, cpu, step, calls)
        reference(call, compiled_aot, ARGS, aot, step, calls, by=by)
        call(compiled, ARGS, xla, step, calls)
      elif kind == 'compiled2':
        calls = max(STEPS[:step].count('compiled') - 1, 0)
        reference(call, fn2, ARGS2, cpu, step, calls)
        reference(call, compiled2_aot, ARGS2, aot, step, calls, by=by)
        call(compiled2, ARGS2, xla, step, calls)
      elif kind == 'sync':
        torch_xla.sync()
      else:
        reference(globals()[kind], cpu)
        reference(globals()[kind], aot, by=by)
        globals()[kind](xla)
      if SYNC == 'step':
        torch_xla.sync()
      reference(compare, f'step {step} ({kind})', aot, cpu, by=by)
      if SYNC != 'end' and kind != 'pending' or kind == 'sync':
        compare(f'step {step} ({kind})', xla, cpu)
    if SYNC == 'end':
      torch_xla.sync()
      compare('the last step and a sync', xla, cpu)
'''

MAIN = '''

if __name__ == '__main__':
  run()
  print('ok')
'''

FAMILIES = ('rows', 'static', 'meta', 'index', 'grad', 'outputs', 'dynamic',
            'reqgrad', 'basemeta', 'inference', 'hooks', 'setitem', 'overlap',
            'viewkinds', 'retake', 'loops', 'ops', 'flat')
# The lists of statements of a program's script, which shrink() drops from.
PARTS = ('setup', 'body', 'eager', 'retake', 'pending', 'after', 'steps')
VERDICTS = ('ok', 'fixed', 'regression', 'limit', 'silent', 'both', 'xla',
            'pytorch', 'invalid')
BUILDS = {}  # 'stock', 'series' -> (python, environment); see build_envs()
TIMEOUT = 300  # seconds a program may take

# Whole-row writes into KV caches: (kind, base shape, the row dim of a view).
CACHES = (
    ('paged 5-D', lambda r: (2, r(2, 4), r(2, 4), r(1, 3), r(2, 4)), 0),
    ('paged 4-D', lambda r: (2, r(2, 4), r(2, 4), r(2, 4)), 0),
    ('static', lambda r: (2, 1, r(1, 3), r(3, 6), r(2, 4)), 2),
)


def broadcasts(src, dst):
  """Whether a tensor of shape `src` can be written into one of shape `dst`."""
  return len(src) <= len(dst) and all(
      s in (1, d) for s, d in zip(reversed(src), reversed(dst)))


@functools.cache
def _op_db():
  """ops: op_db's ops with float32 on the CPU and an in-place or out=
  variant, by name (`name.variant`)."""
  import torch
  from torch.testing._internal.common_methods_invocations import op_db
  return {
      f'{op.name}.{op.variant_test_name}': op
      for op in op_db
      if torch.float32 in op.supported_dtypes('cpu') and
      (op.inplace_variant or op.supports_out)
  }


@functools.cache
def _samples(name):
  """As the program's `op_sample` makes them."""
  torch = sys.modules['torch']
  torch.manual_seed(0)
  return list(_op_db()[name].sample_inputs('cpu', torch.float32))


def _literal(x):
  """`x` as source if it is a plain value (not a tensor), else None."""
  plain = (bool, int, str, type(None))
  if isinstance(x, float) and math.isfinite(x) or isinstance(x, plain):
    return repr(x)
  if isinstance(x, (tuple, list)) and all(isinstance(v, plain) for v in x):
    return repr(x)
  return repr(
      x) if repr(x).startswith('torch.') and ' ' not in repr(x) else None


def _same(f, s):
  """`f(s)`'s tensor result, the same under another random seed (not
  `bernoulli_`), on CPU eager; None if it raises or differs."""
  torch = sys.modules['torch']
  results = []
  for seed in (1, 2):
    torch.manual_seed(seed)
    try:
      results.append(f(s))
    except Exception:
      return None
  same = all(
      isinstance(r, torch.Tensor) and r.layout == torch.strided
      for r in results) and torch.allclose(*results, equal_nan=True)
  return results[0] if same else None


def _runs(f, s):
  """Whether the in-place `f` runs on the sample's input on CPU eager."""
  torch = sys.modules['torch']
  if f is None or not isinstance(s.input, torch.Tensor) or (s.input.dtype
                                                            != torch.float32):
    return False
  out = _same(lambda s: f(s.input.clone(), *s.args, **s.kwargs), s)
  return out is not None and out.shape == s.input.shape


def _out_shape(op, s):
  """The shape of the op's one float32 tensor result on the sample, if its
  out= variant writes it."""
  torch = sys.modules['torch']
  if not isinstance(s.input, torch.Tensor):
    return None
  out = _same(lambda s: op.op(s.input.clone(), *s.args, **s.kwargs), s)
  if out is None or out.dtype != torch.float32 or out.layout != torch.strided:
    return None
  into = lambda s: op.op(
      s.input.clone(), *s.args, out=torch.empty_like(out), **s.kwargs)
  return tuple(out.shape) if _same(into, s) is not None else None


class Program:
  """A random program, as the statements of a script."""

  def __init__(self, seed, families=FAMILIES):
    self.seed, self.families, self.drawn = seed, families, set()
    rng = random.Random(seed)
    self.setup, self.body, self.after = [], [], []  # setup(device), fn, after
    self.eager, self.retake, self.pending = [], [], []  # eager steps (t)
    self.shapes, self.exprs = {}, {}  # name -> shape; view -> expression
    self.contiguous = {}  # name -> whether flatten(0, 1) is a view of it
    self.static = []  # names fn reads as globals or attributes of `model`
    self.other_shape = {}  # view -> its shape after its metadata mutation
    self.readonly, self.ints = set(), set()  # expanded; int32 views
    self.partner = {}  # view -> the view it overlaps (overlap)
    self.grads, self.dynamic, self.sync = [], None, None
    self.loop = None  # loops: the layer of each call
    # loops has no other family but index; drawn apart, so that the other
    # programs stay as they were, and always when it is the only one on.
    alone = not set(families) - {'loops', 'index'}
    if self._chance(random.Random(f'loops {seed}'), 'loops',
                    1 if alone else 0.1):
      self.nograd, self.inference = False, None
      self._loops(rng)
      return
    for family, make in (('ops', self._ops), ('flat', self._flat)):
      # Drawn apart as loops, alone, with no other family.
      if self._chance(random.Random(f'{family} {seed}'), family,
                      1 if set(families) == {family} else 0.1):
        self.nograd, self.inference = False, None
        make(rng)
        return
    # The families drawn first shape the tensors, the others come after.
    self.grad = self._chance(rng, 'grad', 0.15)
    static = self._chance(rng, 'static', 0.25)
    cache = rng.choice(CACHES) if self._chance(rng, 'rows', 0.3) else None
    # Of the view chains, which a KV cache does not have.
    self.viewkinds = not cache and self._chance(rng, 'viewkinds', 0.25)
    self.basemeta = not cache and self._chance(rng, 'basemeta', 0.2)
    overlap = not cache and self._chance(rng, 'overlap', 0.2)
    self.setitem = self._chance(rng, 'setitem', 0.25)
    retake = self._chance(rng, 'retake', 0.2)
    self.hooks = self._chance(rng, 'hooks', 0.15)
    self.inference = rng.choice(
        ('all', 'all',
         'calls')) if not (self.grad or self.hooks) and self._chance(
             rng, 'inference', 0.15) else None
    self.nograd = not (self.inference or self.hooks or
                       self.grad) and self._chance(rng, 'reqgrad', 0.2)
    dynamic = self._chance(rng, 'dynamic', 0.2)
    self.row_dim = cache[2] if cache else None
    bases = self._cache(rng, cache) if cache else self._bases(rng, overlap)
    views = list(self.exprs)
    self.inside = rng.random() < 0.3
    toggle, toggle_in_fn = None, False
    if self._chance(rng, 'meta', 0.25):  # a metadata mutation of `toggled`
      toggled = rng.choice(views)
      toggle, other = self._toggle(rng, self.shapes[toggled])
      toggle_in_fn = not self.inside and rng.random() < 0.2
      if not self.inside and other != self.shapes[toggled]:
        self.other_shape[toggled] = other  # fn sees both shapes
    if overlap and rng.random() < 0.5:
      self.dynamic = True
    if self.inside:
      self._views_inside(rng, views, static, retake)
    else:
      self._views_passed(rng, bases, views, static, overlap, retake)
    self.steps = ['compiled'] * rng.randint(1, 3)
    if toggle_in_fn and toggled in self.params:  # each call undoes the last
      self._insert(rng, toggle.format(toggled))
      self.steps = ['compiled'] * rng.randint(2, 3)
      toggle = None
    if self.grad or self.hooks:
      self._grad(rng)
    for name in self.static:  # globals, or attributes of `model`
      if rng.random() < 0.5:
        self.body = [
            re.sub(rf'(?<![\w.]){name}\b(?!_)', f'model.{name}', s)
            for s in self.body
        ]
    if toggle:
      self.eager.append(toggle.format(f"t['{toggled}']"))
      self.steps = ['compiled', 'eager', 'compiled'
                   ] + (['eager', 'compiled'] if rng.random() < 0.5 else [])
    if rng.random() < 0.6:  # an eager write or read
      if 'eager' not in self.steps:
        self.steps.insert(rng.randint(1, len(self.steps)), 'eager')
      name = rng.choice([n for n in bases + views if n not in self.readonly])
      self.eager.insert(
          rng.randint(0, len(self.eager)),
          rng.choice([
              f"t['{name}'].add_(1)", f"t['{name}'].mul_(-1)",
              f"t['read'] = t['{name}'] * 2"
          ]))
      self.setup.append('read = None')
    if self._chance(rng, 'outputs', 0.4):
      self._outputs(rng)
    if dynamic:
      self._tokens(rng)
    if self.nograd:  # requires_grad_() on some of a group, not on all
      group = [n for n in bases + views if n not in self.ints]
      for name in rng.sample(group, rng.randint(1, max(1, len(group) - 1))):
        self.setup.append(f'{name}.requires_grad_()')
    if retake:
      self._retake(rng, bases, views)

  def _loops(self, rng):
    """loops: one fn called on the views of each layer of one KV pool in
    turn, as a decoder's layers, for one to three decode steps; fn2 reads
    the layer a call wrote."""
    layers, d = rng.randint(2, 4), rng.randint(2, 4)
    layout = rng.choice(('flat', 'flat', 'paged', 'window'))
    if layout == 'flat':  # (S, D) a layer, rows written by index
      cache = (rng.randint(3, 6), d)
      size, dim, write = cache[0], 0, rng.choice(('index_copy', 'index_put'))
    elif layout == 'paged':  # vLLM's (blocks, block, D), written by slots
      cache = (rng.randint(2, 4), rng.randint(1, 3), d)
      size, dim, write = cache[0] * cache[1], 0, 'slots'
    else:  # HF's StaticCache (1, H, S, D), written at positions
      cache = (1, rng.randint(1, 3), rng.randint(3, 6), d)
      size, dim, write = cache[2], 2, rng.choice(('window', 'index_copy'))
    shape = (layers, 2) + cache
    self.setup.append('pool = ' + rng.choice(('torch.zeros', 'values')) +
                      f'{shape}.to(device)')
    self.shapes['pool'] = shape
    # Two views a call (kc, vc), the keys only, or the layer, split in fn.
    how = rng.choice(('pair', 'pair', 'layer', 'keys'))
    if how == 'layer':
      names = ['kv{}']
      expr = rng.choice(
          ('pool[{0}]', 'pool.select(0, {0})', 'pool.unbind(0)[{0}]'))
      self.body.append('key_cache, value_cache = ' +
                       rng.choice(('kv', 'kv[0], kv[1]', 'kv.unbind(0)',
                                   'kv.narrow(0, 0, 2).unbind(0)')))
    else:
      names = ['kc{}', 'vc{}']
      expr = rng.choice(
          ('pool[{0}]', 'pool[{0}, 0], pool[{0}, 1]',
           'pool[{0}][0], pool[{0}][1]', 'pool[{0}].narrow(0, 0, 2).unbind(0)'))
    retake = rng.random() < 0.5  # taken again before each call
    for l in range(layers):
      views = [n.format(l) for n in names]
      self.setup.append(f'{", ".join(views)} = {expr.format(l)}')
      if retake:
        self.retake.append(', '.join(f"t['{v}']" for v in views) + ' = ' +
                           re.sub(r'\bpool\b', "t['pool']", expr.format(l)))
    written = {
        'pair': ['key_cache', 'value_cache'],
        'layer': ['kv']
    }.get(how, ['key_cache'])
    sources = ['k'] if how == 'keys' else ['k', 'v']
    pos = 'p' if write == 'window' else 'idx'
    self.params = written + sources + [pos]
    self.args = [n.format('{layer}') for n in names[:len(written)]
                ] + [f'{n}{{call}}' for n in sources + [pos]]
    if rng.random() < 0.5:
      # Donated as passed, or a layer's halves once fn splits it.
      halves = how == 'layer' and rng.random() < 0.5
      at = len(self.body) if halves else 0
      self.body[at:at] = [
          f'DONATE({n}, True)'
          for n in (['key_cache', 'value_cache'] if halves else written)
      ]
    padded = write != 'window' and self._chance(rng, 'index', 0.3)
    for name, src in zip(('key_cache', 'value_cache'), sources):
      if write == 'window':
        self.body.append(f'{name}[:, :, p:p + 1] = {src}')
        continue
      view = f'{name}.flatten(0, 1)' if write == 'slots' else name
      self.body.append(
          self._indexed(
              f'{view}[{{}}] = {{}}' if write == 'index_put' else
              f'{view}.index_copy_({dim}, {{}}, {{}})', view, dim,
              ('idx', 0, padded), src))
    # The calls: the layers in turn (one order, or shuffled each step).
    order = rng.choice((list(range(layers)), list(range(layers))[::-1], None))
    sync = rng.choice(('call', 'step', 'end', None))
    self.sync = sync and 'end'  # None: compared after every step
    reads = rng.random() < 0.35
    self.loop, self.steps = [], []
    n = 1 if write == 'window' else rng.randint(1, min(3, size))  # tokens
    for _ in range(rng.randint(1, 3)):
      rows = [str(r) for r in rng.sample(range(size), n)]
      if padded:  # vLLM's pad slot, past the end: XLA drops it
        rows[-1] = rng.choice(('PAD', str(size)))
      for l in order or rng.sample(range(layers), layers):
        call = len(self.loop)
        self.loop.append(l)
        src = (1, cache[1], n, d) if layout == 'window' else (n, d)
        for name, sign in zip(sources, '+-'):
          self.setup.append(
              f'{name}{call} = values{src}.to(device) {sign} {call + 1}')
        self.setup.append(f'p{call} = {rows[0]}' if write == 'window' else
                          f'idx{call} = torch.tensor([{", ".join(rows)}], '
                          'device=device)')
        self.steps += ['retake'] * retake + ['compiled']
        if reads and rng.random() < 0.7:
          self.steps.append('compiled2')
        self.steps += ['sync'] * (sync == 'call')
      self.steps += ['sync'] * (sync == 'step')
    if reads:  # q against the keys of the layer the last call wrote
      q = (1, cache[1], 1, d) if layout == 'window' else (1, d)
      self.setup.append(f'q = values{q}.to(device)')
      self.params2 = (['kv'] if how == 'layer' else
                      ['key_cache', 'value_cache']) + ['q']
      self.args2 = [n.format('{layer}') for n in names] + ['q']
      self.body2 = ['key_cache, value_cache = kv'] * (how == 'layer')
      keys, values = (f'{n}.flatten(0, 1)' if layout == 'paged' else n
                      for n in ('key_cache', 'value_cache'))
      score = (f'q @ {keys}.transpose(-1, -2)'
               if layout == 'window' else f'q @ {keys}.T')
      self.body2.append('return ' +
                        rng.choice((score,
                                    f'({score}).softmax(-1) @ {values}')))
    calls = [i for i, s in enumerate(self.steps) if s == 'compiled']
    if len(calls) > 1 and rng.random() < 0.3:  # synced before the next call
      view = names[0].format(rng.randrange(layers))
      self.eager.append(f"t['read'] = t['{view}']" + rng.choice(
          ('[0] * 2', '.sum(0)') if how == 'layer' else (' * 2', '.sum(0)')))
      at = rng.choice(calls[:-1]) + 1
      self.steps[at:at] = ['eager', 'sync']
      self.setup.append('read = None')

  def _ops(self, rng):
    """ops: an OpInfo op's in-place variant applied to views of one base (one
    view, or both of `base.unbind(0)`, donated or not), or its out= variant
    writing into a view; one sample input of op_db's, valid on CPU eager."""
    torch = sys.modules['torch'] if _op_db() else None
    while True:
      name = rng.choice(sorted(_op_db()))
      op, samples = _op_db()[name], _samples(name)
      i = rng.randrange(len(samples))
      s = samples[i]
      args = [*s.args, *s.kwargs.values()]
      literals = [
          None if isinstance(a, torch.Tensor) else _literal(a) for a in args
      ]
      if None in [
          l for a, l in zip(args, literals) if not isinstance(a, torch.Tensor)
      ]:
        continue
      modes = ['lone', 'two'] if _runs(op.inplace_variant, s) else []
      modes += ['out'] if op.supports_out and _out_shape(op, s) else []
      if modes:
        break
    mode = rng.choice(modes)
    self.setup.append(f'op, s = op_sample({name!r}, {i})')
    tensors, call = [], []
    for j, (a, literal) in enumerate(zip(args, literals)):
      key = j if j < len(s.args) else repr(list(s.kwargs)[j - len(s.args)])
      where = 'args' if j < len(s.args) else 'kwargs'
      if literal is None:
        self.setup.append(f'a{j} = s.{where}[{key}].to(device)')
        tensors.append(f'a{j}')
      value = f'a{j}' if literal is None else literal
      call.append(value if j <
                  len(s.args) else f'{list(s.kwargs)[j - len(s.args)]}={value}')
    call = ', '.join(call)
    if mode == 'out':
      shape = _out_shape(op, s)
      self.setup += [
          f'x = s.input.to(device)',
          f'base = values(2, *{tuple(shape)}).to(device)', 'view = base[1]',
          'f = op.op'
      ]
      self.params = ['x', 'view', *tensors, 'f']
      self.body.append(f'f(x, {call}{", " if call else ""}out=view)')
    else:
      self.setup += [
          'base = torch.stack([s.input, s.input.flatten().roll(1).view_as('
          's.input)]).to(device)', 'view0, view1 = base.unbind(0)'
          if mode == 'two' else 'view1 = base[1]', 'f = op.inplace_variant'
      ]
      views = ['view0', 'view1'] if mode == 'two' else ['view1']
      self.params = [*views, *tensors, 'f']
      if mode == 'two' and rng.random() < 0.5:
        self.body += [f'DONATE({v}, True)' for v in views]
      self.body += [f'f({v}{", " if call else ""}{call})' for v in views]
    self.args = list(self.params)
    self.steps = ['compiled'] * 2

  def _flat(self, rng):
    """flat: training steps over a weight and a bias that are views of one flat
    buffer (FSDP-, ZeRO-style), by an optimizer or by hand with _foreach ops,
    with an EMA of them or their gradients in views of a bucket."""
    kind = rng.choice(
        ('SGD', 'Adam', 'AdamW', 'RMSprop', 'foreach', 'ema', 'bucket'))
    self.setup += [
        'flat = values(2, 10).to(device)',
        'w, b = flat[0, :6].view(2, 3), flat[0, 6:]'
    ]
    steps = rng.randint(2, 3)
    for c in range(steps):
      self.setup.append(f'gw{c}, gb{c} = values(2, 3).to(device).cos() * '
                        f'{c + 1}, values(4).to(device).sin() - {c}')
    grads = ['gw{call}', 'gb{call}']
    if kind in ('SGD', 'Adam', 'AdamW', 'RMSprop'):
      options = {
          'SGD': 'momentum=0.9',
          'RMSprop': 'momentum=0.5'
      }.get(kind, 'weight_decay=0.01')
      foreach = rng.choice((True, False))
      self.setup += [
          'w.requires_grad_()', 'b.requires_grad_()',
          f'opt = torch.optim.{kind}([w, b], lr=0.1, {options}, '
          f'foreach={foreach})'
      ]
      self.params, self.args = ['w', 'b', 'opt', 'gw',
                                'gb'], ['w', 'b', 'opt', *grads]
      self.body += ['w.grad, b.grad = gw, gb', 'opt.step()']
    elif kind in ('foreach', 'ema'):
      self.params, self.args = ['w', 'b', 'gw', 'gb'], ['w', 'b', *grads]
      self.body += [
          'torch._foreach_mul_([w, b], 0.9)',
          'torch._foreach_add_([w, b], [gw, gb], alpha=-0.1)'
      ]
      if kind == 'ema':
        self.setup.append('ew, eb = flat[1, :6].view(2, 3), flat[1, 6:]')
        self.params[2:2], self.args[2:2] = ['ew', 'eb'], ['ew', 'eb']
        self.body += [
            'torch._foreach_mul_([ew, eb], 0.9)',
            'torch._foreach_add_([ew, eb], [w, b], alpha=0.1)'
        ]
    else:  # DDP's gradient bucket: views written, donated, averaged
      self.setup.append('bucket = flat[1]')
      self.setup.append('bw, bb = bucket[:6].view(2, 3), bucket[6:]')
      self.params, self.args = ['bucket', 'bw', 'bb', 'gw',
                                'gb'], ['bucket', 'bw', 'bb', *grads]
      if rng.random() < 0.5:
        self.body += ['DONATE(bw, True)', 'DONATE(bb, True)']
      self.body += ['bw.copy_(gw)', 'bb.copy_(gb)', 'bucket.div_(2)']
    self.steps = ['compiled'] * steps
    if rng.random() < 0.3:
      self.eager.append("t['read'] = t['flat'] * 2")
      self.steps.insert(1, 'eager')
      self.setup.append('read = None')

  def _chance(self, rng, family, p):
    """True with probability `p` if `family` is on."""
    if rng.random() < p and family in self.families:
      self.drawn.add(family)
      return True
    return False

  def _bases(self, rng, overlap):
    """One or two bases with 1 to 3 random view chains on them."""
    bases = []
    for b in range(rng.choice((1, 1, 2))):
      shape = tuple(rng.randint(2, 5) for _ in range(rng.randint(2, 4)))
      name = f'base{b}'
      self.setup.append(f'{name} = values{shape}.to(device)')
      self.shapes[name], self.contiguous[name] = shape, True
      if self.basemeta and rng.random() < 0.8:
        for first in [True] + [False] * rng.randint(0, 1):
          self._base_meta(rng, name, first)
      bases.append(name)
    for _ in range(rng.randint(1, 3)):
      base = rng.choice(bases)
      expr, shape, contiguous = base, self.shapes[base], self.contiguous[base]
      readonly = is_int = False
      for _ in range(rng.randint(1, 3)):
        op = self._view_op(rng, expr, shape, contiguous, is_int)
        if op is None:
          break
        expr, shape, contiguous, kind = op
        readonly |= kind == 'expand'
        is_int ^= kind == 'dtype'
      if expr != base:
        self._add_view(expr, shape, contiguous, readonly, is_int)
    if overlap:
      self._overlapping(rng, bases)
    if all(v in self.readonly for v in self.exprs):  # one to write
      self._add_view(f'{bases[0]}[0]', self.shapes[bases[0]][1:],
                     self.contiguous[bases[0]])
    return bases

  def _base_meta(self, rng, name, first):
    """An in-place metadata change of base `name`, before its views."""
    shape, n = self.shapes[name], len(self.shapes[name])
    kinds = ['unsqueeze'] + (['squeeze'] if 1 in shape else []) + (
        ['transpose'] if n >= 2 else
        []) + (['t'] if n == 2 else []) + (['as_strided'] * 2 if first else [])
    kind = rng.choice(kinds)
    if kind == 'as_strided':  # 2-D, an offset, by rows or by columns
      size = math.prod(shape)
      b = rng.randint(2, 3)
      a = rng.randint(1, size // b)
      offset = rng.randint(0, size - a * b)
      rows = rng.random() < 0.5
      stride = (b, 1) if rows else (1, a)
      statement = f'{name}.as_strided_({(a, b)}, {stride}, {offset})'
      shape, self.contiguous[name] = (a, b), rows
    elif kind == 'unsqueeze':
      d = rng.randint(0, n)
      statement, shape = f'{name}.unsqueeze_({d})', shape[:d] + (1,) + shape[d:]
    elif kind == 'squeeze':
      d = shape.index(1)
      statement, shape = f'{name}.squeeze_({d})', shape[:d] + shape[d + 1:]
    else:
      d0, d1 = (0, 1) if kind == 't' else rng.sample(range(n), 2)
      swapped = list(shape)
      swapped[d0], swapped[d1] = shape[d1], shape[d0]
      statement = f'{name}.t_()' if kind == 't' else (
          f'{name}.transpose_({d0}, {d1})')
      shape, self.contiguous[name] = tuple(swapped), False
    self.setup.append(statement)
    self.shapes[name] = shape

  def _overlapping(self, rng, bases):
    """Two narrows of one tensor, of one shape, that overlap."""
    sources = bases + [
        v for v in self.exprs if v not in self.readonly | self.ints
    ]
    src = rng.choice(sources)
    shape = self.shapes[src]
    dims = [d for d, s in enumerate(shape) if s >= 3]
    if not dims:
      return
    d = rng.choice(dims)
    length = rng.randint(2, shape[d] - 1)
    start = rng.randint(0, shape[d] - length - 1)
    starts = (start,
              rng.randint(start + 1, min(start + length - 1,
                                         shape[d] - length)))
    contiguous = self.contiguous.get(src) and all(s == 1 for s in shape[:d])
    names = [
        self._add_view(f'{self.exprs.get(src, src)}.narrow({d}, {s}, {length})',
                       shape[:d] + (length,) + shape[d + 1:], contiguous)
        for s in starts
    ]
    self.partner.update({names[0]: names[1], names[1]: names[0]})

  def _cache(self, rng, cache):
    """A KV cache and its K and/or V views, as vLLM and HF's StaticCache."""
    shape = cache[1](rng.randint)
    self.setup.append(f'base0 = values{shape}.to(device)')
    self.shapes['base0'] = shape
    picks = rng.choice(([0, 1], [0, 1], [0], [1]))
    how = rng.choice(
        ('base0[{}]', 'base0.unbind(0)[{}]', 'base0.select(0, {})'))
    for v in picks:
      self._add_view(how.format(v), shape[1:], True)
    return ['base0']

  def _add_view(self, expr, shape, contiguous, readonly=False, is_int=False):
    name = f'v{len(self.exprs)}'
    self.setup.append(f'{name} = {expr}')
    self.exprs[name], self.shapes[name] = expr, shape
    self.contiguous[name] = contiguous
    if readonly:
      self.readonly.add(name)
    if is_int:
      self.ints.add(name)
    return name

  def _source(self, name):
    """x_{name}: values fn writes into `name`."""
    self.setup.append(f'x_{name} = values{self.shapes[name]}.to(device)')
    self.shapes[f'x_{name}'] = self.shapes[name]
    return f'x_{name}'

  def _make_static(self, rng, names):
    """Marks some of `names` static; fn then reads them as globals."""
    chosen = [n for n in names if rng.random() < 0.5] or [rng.choice(names)]
    self.setup.append('count = torch.zeros((), dtype=torch.int64, '
                      'device=device)')
    self.shapes['count'] = ()
    for name in chosen + ['count']:
      self.setup.append(f'torch._dynamo.mark_static_address({name})')
    self.static = chosen + ['count']
    return chosen

  def _sub(self, statement):
    """`statement` of fn with the views, when fn takes them itself, spelled
    as their expressions."""
    if not self.inside:
      return statement
    for name, expr in self.exprs.items():
      statement = re.sub(rf'\b{name}\b(?!_)', f'({expr})', statement)
    return statement

  def _insert(self, rng, statement, at=None):
    """Puts `statement` into fn (under no_grad where fn computes a loss),
    before its return."""
    returns = bool(self.body) and self.body[-1].startswith('return ')
    if at is None:
      at = rng.randint(0, len(self.body) - returns)
    if self.grad and not statement.startswith(('DONATE', 'with ')):
      statement = f'with torch.no_grad(): {statement}'
    self.body.insert(at, self._sub(statement))

  def writable(self):
    """The tensors fn may write."""
    return [
        n for n in (self.exprs if self.inside else self.targets)
        if n.removesuffix('_again') not in self.readonly
    ]

  def _views_inside(self, rng, views, static, retake):
    """The bases are passed; fn takes the views of them itself."""
    used = sorted({re.match(r'\w+', self.exprs[v])[0] for v in views})
    params = list(used)
    if static:  # read as globals: not passed
      chosen = self._make_static(rng, used)
      params = [p for p in params if p not in chosen]
    params += [self._source(v) for v in views if v not in self.readonly]
    self.args, self.params, self.targets = list(params), params, used
    for name in used:
      if rng.random() < (0.9 if retake else 0.6):
        self.body.append(f'DONATE({name}, True)')
    for _ in range(rng.randint(1, 4)):
      self.body.append(
          self._sub(self._mutation(rng, rng.choice(self.writable()))))
    if self.static:
      self.body.insert(rng.randint(0, len(self.body)), 'count.add_(1)')
    if rng.random() < 0.3:
      self.body.append('return ' + ' + '.join(f'{b}.sum()' for b in used))

  def _views_passed(self, rng, bases, views, static, overlap, retake):
    """Views (and sometimes a base) are passed to fn."""
    args = list(views)
    if rng.random() < (0.5 if retake else 0.25):
      args.append(rng.choice(bases))
    rng.shuffle(args)
    # `params` names fn's parameters; ARGS names the tensors passed to them.
    params = list(args)
    if rng.random() < (0.6 if overlap else 0.1):  # one tensor passed twice
      args.append(args[0])
      params.append(f'{args[0]}_again')
      self.shapes[params[-1]] = self.shapes[args[0]]
    # Extra inputs that give values to write.
    for name in sorted(set(args) - self.readonly):
      if rng.random() < 0.7:
        args.append(self._source(name))
        params.append(args[-1])
    self.targets = [
        p for p in params if not p.startswith('x_') and
        p.removesuffix('_again') not in self.readonly
    ]
    if static:  # read as globals: not passed (their `_again` still is)
      for name in self._make_static(rng,
                                    [t for t in self.targets if t in args]):
        i = params.index(name)
        del args[i], params[i]
    self.args, self.params = args, params
    if rng.random() < 0.3:
      name = rng.choice(views)
      self.setup.append(f'{name}_clone = {name}.clone()')
    for name in self.targets:
      if rng.random() < (0.6 if retake else 0.3):
        self.body.append(f'DONATE({name}, True)')
    for _ in range(rng.randint(1, 4)):
      self.body.append(self._mutation(rng, rng.choice(self.targets)))
    if self.static:
      self.body.insert(rng.randint(0, len(self.body)), 'count.add_(1)')
    ret = rng.random()
    if ret < 0.3:
      self.body.append('return ' +
                       ' + '.join(f'{a}.sum()' for a in self.targets))
    elif ret < 0.5:
      name = rng.choice(self.targets)
      self.body.append(
          f'return {name}[0]' if self.shapes[name] else f'return {name}')

  def _grad(self, rng):
    """A loss from a weight that requires grad, and from views of a leaf
    that requires grad with hooks on them (hooks); the writes under
    no_grad."""
    self.grad = True
    r, n, m = (rng.randint(2, 4) for _ in range(3))
    self.shapes.update(w=(n, m), x_w=(r, n), y=(r, m))
    self.setup += [
        f'w = values({n}, {m}).to(device).requires_grad_()',
        f'x_w = values({r}, {n}).to(device)'
    ]
    self.args += ['w', 'x_w']
    self.params += ['w', 'x_w']
    self.grads = ['w']
    loss = ['(y * y).mean()']
    if self.hooks:
      a, b = rng.randint(2, 4), rng.randint(2, 4)
      self.setup += [
          f'p = values({a}, {b}).to(device).requires_grad_()', 'seen = []'
      ]
      self.grads.append('p')
      for k in range(rng.randint(1, 2)):
        i, j, s = rng.randrange(a), rng.randrange(b), rng.randrange(a)
        expr, shape = rng.choice(
            ((f'p[{i}]', (b,)), ('p.t()', (b, a)), (f'p[:, {j}]', (a,)),
             (f'p.narrow(0, {s}, {a - s})', (a - s, b)), (f'p.unbind(1)[{j}]',
                                                          (a,))))
        name = f'h{k}'
        self.setup.append(f'{name} = {expr}')
        how = rng.choice(('hook', 'retain', 'both'))
        if how != 'retain':
          self.setup.append(
              f'{name}.register_hook(lambda g: seen.append(g * {k + 2}))')
        if how != 'hook':
          self.setup.append(f'{name}.retain_grad()')
          self.grads.append(name)
        self.shapes[name] = shape
        self.args += [name, self._source(name)]
        self.params += [name, f'x_{name}']
        loss.append(f'({name} * x_{name}).sum()')
    floats = [
        t for t in self.targets if t.removesuffix('_again') not in self.ints
    ]
    read = rng.choice(floats + [''])
    body = [s for s in self.body if not s.startswith('return ')]
    self.body = ['y = x_w @ w' + (f' + {read}.mean()' if read else '')]
    self.body += [
        s if s.startswith(('DONATE', 'with ')) else f'with torch.no_grad(): {s}'
        for s in body
    ]
    if floats and rng.random() < 0.5:  # running stats
      self.body.append(f'with torch.no_grad(): {rng.choice(floats)}.mul_(0.9)'
                       '.add_(y.mean() * 0.1)')
    self.body.append('return ' + ' + '.join(loss))

  def _outputs(self, rng):
    """fn also returns views of intermediates and of inputs; after(outs)
    writes one of the outputs in place."""
    if not (self.grad or self.hooks or self.inference or
            self.nograd) and rng.random() < 0.3:
      self.grad = True
      self._grad(rng)
    returns = bool(self.body) and self.body[-1].startswith('return ')
    outs = [self.body.pop()[len('return '):]] if returns else []
    count = len(outs)
    sources = [
        p for p in self.params if not p.startswith('index') and
        self.shapes.get(p) and p.replace('_again', '') not in self.other_shape
    ] + (['y'] * 2 if self.grad else [])
    if not sources:
      return
    views = []  # (expression, how many outputs it gives)
    for j in range(rng.randint(1, 2)):
      src = rng.choice(sources)
      shape = self.shapes[src]
      out = f'out{j}'
      after_y = [i + 1 for i, s in enumerate(self.body) if s.startswith('y =')]
      self.body.insert(
          rng.randint(after_y[0] if src == 'y' else 0, len(self.body)),
          f'{out} = ' + rng.choice(
              ('{}.mul(2)', '{} + 1', '{}.clone()')).format(src))
      if not re.match(r'(w|y|h\d)$', src) and src.removesuffix(
          '_again') not in self.readonly and rng.random() < 0.3 and (
              f'DONATE({src}, True)' not in self.body):
        self.body.insert(0, f'DONATE({src}, True)')
      kinds = ['itself', 'first', 'unbind', 'split', 't', 'unsqueeze']
      if re.match(r'(base\d|x_\w+|w|y)$', src.replace(
          '_again', '')) and (self.contiguous.get(src, True)):
        kinds += ['view', 'view']  # contiguous: view(-1) is a view
      for _ in range(rng.randint(1, 3)):
        kind = rng.choice(kinds)
        views.append({
            'itself': (out, 1),
            'first': (f'{out}[0]', 1),
            'unbind': (f'*{out}.unbind(0)', shape[0]),
            'split': (f'*{out}.split(1)', shape[0]),
            't':
                (f'{out}.t()' if len(shape) <= 2 else f'{out}.transpose(0, -1)',
                 1),
            'unsqueeze': (f'{out}.unsqueeze(0)', 1),
            'view': (f'{out}.view(-1)', 1),
        }[kind])
    inputs = [
        s for s in sources
        if s != 'y' and s.removesuffix('_again') not in self.readonly
    ]
    if inputs and rng.random() < 0.4:  # a view of an input (or the input)
      src = rng.choice(inputs)
      views.append((rng.choice((src, f'{src}[0]', f'{src}.unsqueeze(0)')), 1))
    rng.shuffle(views)
    outs += [expr for expr, _ in views]
    count += sum(n for _, n in views)
    self.body.append('return ' + ', '.join(outs) +
                     (',' if len(outs) == 1 else ''))
    self.after.append(f'outs[{rng.randrange(count)}].' +
                      rng.choice(('add_(1)', 'mul_(-2)', 'fill_(0.5)')))
    # fn writes what it donates, as upstream's donation asks: XLA may give
    # the buffer of a donated input that fn does not write to an output of
    # its shape, and the input is then deleted.
    for i in reversed(range(len(self.body))):
      donated = re.match(r'DONATE\((\w+), True\)$', self.body[i])
      if donated:
        self._insert(rng, f'{donated.group(1)}.add_(0)', i + 1)

  def _tokens(self, rng):
    """A write of tokens whose count changes from call to call (dynamic)."""
    self.dynamic = rng.choice((True, None))  # None: mark_dynamic only
    names = [
        n for n in self.writable()
        if self.shapes[n] and self.shapes[n][0] >= 2 and
        n.removesuffix('_again') not in self.other_shape.keys() | self.ints
    ]
    if not names:
      return
    name = rng.choice(names)
    shape = self.shapes[name]
    marked = self.dynamic is None or rng.random() < 0.5
    # maybe_: no ConstraintViolationError where dynamo specializes the size
    mark = rng.choice(('mark_dynamic', 'maybe_mark_dynamic'))
    sizes = list(range(1 + marked, shape[0] + 1))
    first = rng.randrange(len(sizes))
    kind = rng.choice(('slice', 'narrow', 'tail', 'index_copy'))
    for call in range(self.steps.count('compiled')):
      n = sizes[(first + call) % len(sizes)]
      made = [f'tok{call} = values{(n,) + shape[1:]}.to(device)']
      if kind == 'index_copy':
        rows = rng.sample(range(shape[0]), n)
        made.append(f'pos{call} = torch.tensor({rows}, device=device)')
      for tensor in made:
        self.setup.append(tensor)
        if marked:
          self.setup.append(f'torch._dynamo.{mark}({tensor.split()[0]}, 0)')
    self.args.append('tok{call}')
    self.params.append('tok')
    if kind == 'index_copy':
      self.args.append('pos{call}')
      self.params.append('pos')
    self._insert(
        rng, {
            'slice': f'{name}[:tok.shape[0]] = tok * 2',
            'narrow': f'{name}.narrow(0, 0, tok.size(0)).add_(tok)',
            'tail': f'{name}[{name}.shape[0] - tok.shape[0]:] = tok - 1',
            'index_copy': f'{name}.index_copy_(0, pos, tok * 3)',
        }[kind])
    views = [(p, d) for p in self.params if p in self.exprs
             for d, s in enumerate(self.shapes[p]) if s >= 2]
    if views and rng.random() < 0.4:  # a view marked dynamic
      self.setup.append(f'torch._dynamo.{mark}(%s, %d)' % rng.choice(views))

  def _retake(self, rng, bases, views):
    """retake: views taken again after each call, syncs, a graph break in
    fn, a pending eager read of a view whose base a call donates."""
    self.sync = rng.choice(('step', 'end', None))
    if not self.inside:
      self.retake = [
          f"t['{v}'] = " + re.sub(r'^(\w+)', r"t['\1']", self.exprs[v])
          for v in views
          if v not in self.static
      ]
    writes = [
        i for i, s in enumerate(self.body)
        if not s.startswith(('DONATE', 'return', 'count', 'y =', 'out'))
    ]
    names = self.writable()
    if writes and names and rng.random() < 0.6:  # a graph break between
      name, other = rng.choice(names), rng.choice(names)
      at = rng.choice(writes) + 1
      self._insert(rng, self._mutation(rng, name), at)
      item = (f'int({other}.sum().item()) % 3' if name.removesuffix('_again')
              in self.ints else f'{other}.sum().item() / 64')
      self._insert(
          rng,
          rng.choice(('torch._dynamo.graph_break()', f'{name}.add_({item})')),
          at)
    donated = [
        re.match(r'DONATE\((\w+)', s)[1]
        for s in self.body
        if s.startswith('DONATE')
    ]
    if donated and rng.random() < 0.7:  # read while its base is donated
      name = rng.choice(donated).removesuffix('_again')
      base = re.match(r'\w+', self.exprs.get(name, name))[0]
      near = [v for v in views if re.match(r'\w+', self.exprs[v])[0] == base]
      near = (near or [base]) if base in bases else views
      name = rng.choice(near)
      self.pending.append(f"t['pending'] = t['{name}']" +
                          rng.choice(('.clone()', ' * 2')))
      self.setup.append('pending = None')
    steps = []
    for kind in self.steps:
      steps += ['pending'] if kind == 'compiled' and self.pending else []
      steps.append(kind)
      steps += ['retake'] if kind == 'compiled' and self.retake else []
    self.steps = steps

  @staticmethod
  def _toggle(rng, shape):
    """A metadata mutation that undoes itself when run again: the statement
    (with {} for the view) and the view's other shape."""
    n = len(shape)
    kinds = ['unsqueeze'] + (['squeeze'] if 1 in shape else []) + (
        ['transpose'] if n >= 2 else []) + (['t'] if n == 2 else [])
    kind = rng.choice(kinds)
    if kind == 'unsqueeze':
      d = rng.randint(0, n)
      return (f'{{0}}.unsqueeze_({d}) if {{0}}.dim() == {n} else '
              f'{{0}}.squeeze_({d})', shape[:d] + (1,) + shape[d:])
    if kind == 'squeeze':
      d = rng.choice([i for i, s in enumerate(shape) if s == 1])
      return (f'{{0}}.squeeze_({d}) if {{0}}.dim() == {n} else '
              f'{{0}}.unsqueeze_({d})', shape[:d] + shape[d + 1:])
    if kind == 't':
      return '{0}.t_()', shape[::-1]
    d0, d1 = rng.sample(range(n), 2)
    other = list(shape)
    other[d0], other[d1] = other[d1], other[d0]
    return f'{{0}}.transpose_({d0}, {d1})', tuple(other)

  def _view_op(self, rng, expr, shape, contiguous, is_int):
    """A view of `expr`: (its expression, shape, contiguous, kind) or None."""
    n = len(shape)
    if not n:
      return None
    kinds = ['select', 'narrow', 'unbind'
            ] + (['transpose'] if n >= 2 else []) + (['t'] if n == 2 else [])
    if n >= 2 and contiguous:
      kinds += ['flatten', 'view']
    if self.viewkinds:
      kinds += ['expand', 'narrow', 'dtype', 'detach'
               ] + (['diagonal'] if n >= 2 else [])
    kind = rng.choice(kinds)
    if kind == 'detach':  # an alias that autograd does not see
      return f'{expr}.detach()', shape, contiguous, kind
    dim = rng.randrange(n)
    lead = all(s == 1 for s in shape[:dim])  # whether dim keeps contiguity
    rest = shape[:dim] + shape[dim + 1:]
    if kind in ('select', 'unbind'):
      i = rng.randrange(shape[dim])
      return (f'{expr}.select({dim}, {i})' if kind == 'select' else
              f'{expr}.unbind({dim})[{i}]'), rest, contiguous and lead, kind
    if kind == 'narrow':
      length = rng.randint(1, shape[dim])
      start = rng.randint(0, shape[dim] - length)
      return (f'{expr}.narrow({dim}, {start}, {length})',
              shape[:dim] + (length,) + shape[dim + 1:], contiguous and
              (lead or length == shape[dim]), kind)
    if kind in ('transpose', 't', 'diagonal'):
      d0, d1 = (0, 1) if kind == 't' else rng.sample(range(n), 2)
      if kind == 'diagonal':
        if n >= 3 and (d0, d1) == (0, 1):  # torch_xla's is wrong, even eager
          d0, d1 = 1, 0
        offset = rng.randint(1 - shape[d0], shape[d1] - 1)
        size = min(shape[d0] + min(offset, 0), shape[d1] - max(offset, 0))
        return (f'{expr}.diagonal({offset}, {d0}, {d1})',
                tuple(s for i, s in enumerate(shape) if i not in (d0, d1)) +
                (size,), False, kind)
      swapped = list(shape)
      swapped[d0], swapped[d1] = shape[d1], shape[d0]
      return (f'{expr}.t()' if kind == 't' else
              f'{expr}.transpose({d0}, {d1})'), tuple(swapped), False, kind
    if kind == 'flatten':
      start = rng.randrange(n - 1)
      end = rng.randrange(start + 1, n)
      return (f'{expr}.flatten({start}, {end})', shape[:start] +
              (math.prod(shape[start:end + 1]),) + shape[end + 1:], contiguous,
              kind)
    if kind == 'view':
      return f'{expr}.view({math.prod(shape)})', (
          math.prod(shape),), contiguous, kind
    if kind == 'expand':  # read only: its elements share memory
      d = rng.randint(0, n)
      new = shape[:d] + (rng.randint(2, 3),) + shape[d:]
      return f'{expr}.unsqueeze({d}).expand{new}', new, False, kind
    dtype = 'float32' if is_int else 'int32'  # the same bytes
    return f'{expr}.view(torch.{dtype})', shape, contiguous, kind

  def _mutation(self, rng, name):
    """A statement of fn that writes into the tensor `name`."""
    shape = self.shapes[name]
    root = name.removesuffix('_again')
    src = f'x_{root}' if f'x_{root}' in self.params else None
    if root in self.ints:  # float32 data seen as int32: writes of bits
      return f'{name}.' + rng.choice(
          ['add_(1)', 'zero_()', 'bitwise_xor_(-2147483648)'] +
          ([f'copy_({src}.view(torch.int32))']
           if src and root not in self.other_shape else []))
    kinds = ['mul', 'fill', 'add_scalar'] + ['read'] * bool(self.readonly)
    partner = self.partner.get(root)
    if partner and not {root, partner} & set(self.other_shape):
      kinds += ['cross', 'cross']
    if root in self.other_shape:  # fn sees two shapes: writes that fit both
      if src and broadcasts(shape, self.other_shape[root]):
        kinds += ['add', 'copy']
    elif src:
      kinds += ['add', 'copy']
      if shape:
        kinds += ['index_copy', 'index_copy', 'setitem', 'index_put']
        if self.setitem:
          kinds += ['broadcast'] * 4
        if 'index' in self.families:
          kinds += ['setitem_index']
        if 'rows' in self.families:
          kinds += ['slice_rows', 'slice_copy']
          if len(shape) >= 2 and self.contiguous.get(root):
            kinds += ['slots']
        if self.row_dim is not None:  # a KV cache: mostly whole-row writes
          kinds += (['slots'] * 3 if self.row_dim == 0 else
                    ['index_copy', 'slice_rows', 'slice_copy'] * 2)
    elif shape and self.setitem:
      kinds += ['broadcast'] * 2
    kind = rng.choice(kinds)
    if kind == 'mul':
      return f'{name}.mul_({rng.choice((2.0, -0.5, 3.0))})'
    if kind == 'fill':
      return f'{name}.fill_({rng.choice((0.0, 1.5, -2.0))})'
    if kind == 'add_scalar':
      return f'{name}.add_({rng.choice((1.0, -3.0))})'
    if kind == 'read':  # of a read-only (expanded) view
      return f'{name}.add_({rng.choice(sorted(self.readonly))}.sum() * 0.25)'
    if kind == 'cross':  # reads the view it overlaps: a copy first
      return f'{name}.' + rng.choice(
          (f'copy_({partner} * -0.5)', f'add_({partner} * 2)'))
    if kind == 'add':
      return f'{name}.add_({src})'
    if kind == 'copy':
      return f'{name}.copy_({src} * -1)'
    if kind == 'setitem':
      start = rng.randrange(shape[-1])
      stop = rng.randint(start + 1, shape[-1])
      return f'{name}[..., {start}:{stop}] = {src}[..., {start}:{stop}] + 1'
    if kind == 'broadcast':
      return self._broadcast(rng, name, shape, src)
    if kind == 'slots':  # vLLM: key_cache.flatten(0, 1).index_copy_(0, ...)
      flat = f'{name}.flatten(0, 1)'
      index = self._index(rng, name, shape[0] * shape[1], True)
      return self._indexed(f'{flat}.index_copy_(0, {{}}, {{}})', flat, 0, index,
                           f'{src}.flatten(0, 1)[:{{}}] * 2')
    dim = (self.row_dim if self.row_dim is not None and rng.random() < 0.7 and
           self.row_dim < len(shape) else rng.randrange(len(shape)))
    if kind.startswith('slice'):  # c[:, :, p:p+n] = k, or its copy_
      start = rng.randrange(shape[dim])
      n = rng.randint(1, shape[dim] - start)
      pre = ':, ' * dim
      target = f'{name}[{pre}{start}:{start + n}]'
      if kind == 'slice_copy':
        return f'{target}.copy_({src}[{pre}:{n}] * 3)'
      return f'{target} = {src}[{pre}:{n}] + 1'
    if kind != 'index_copy':
      dim = 0
    index = self._index(rng, name, shape[dim], kind == 'index_copy')
    if kind == 'index_put':
      return self._indexed(f'{name}.index_put_(({{}},), {{}})', name, 0, index,
                           f'{src}[:{{}}] - 2')
    if kind == 'setitem_index':
      return self._indexed(f'{name}[{{}}] = {{}}', name, 0, index,
                           f'{src}[:{{}}] + 3')
    rows = ', '.join(':' if d != dim else ':{}' for d in range(len(shape)))
    return self._indexed(f'{name}.index_copy_({dim}, {{}}, {{}})', name, dim,
                         index, f'{src}[{rows}] * 2')

  @staticmethod
  def _broadcast(rng, name, shape, src):
    """`name[key] = value`, value broadcast to the region (setitem)."""
    a = rng.randrange(shape[0])
    b = rng.randint(a + 1, shape[0])
    c = rng.randrange(shape[-1])
    d = rng.randint(c + 1, shape[-1])
    key, region = rng.choice(
        ((f'[{a}]', shape[1:]), (f'[{a}:{b}]', (b - a,) + shape[1:]),
         (f'[..., {c}:{d}]', shape[:-1] + (d - c,))))
    whole = src or name
    values = [
        rng.choice(('-1.5', '2.0', '0.25')), f'{whole}.sum() / 10',
        f'{whole}[{", ".join("0" * len(shape))}]'
    ]
    if src and region:  # fewer dims, leading unit dims, a trailing one
      values += [
          f'{src}{key}[0]', f'{src}{key}[:1]', f'{src}{key}[None]',
          f'{src}{key}[..., :1] * 2', f'{src}{key}[None, :1]'
      ]
    return f'{name}{key} = {rng.choice(values)}'

  def _index(self, rng, name, size, int64):
    """An index of distinct rows of `size`, maybe ending with pad slots
    (out of range), int32 or int64 (int64 where `int64`: index_copy_), built
    in fn or passed to it: (its expression, its length, whether padded)."""
    n = rng.randint(1, size)
    index = rng.sample(range(size), n)
    if rng.random() < 0.5:
      index.sort()
    if not int64 and self._chance(rng, 'index', 0.2):  # counts from the end
      index[0] -= size
    padded = self._chance(rng, 'index', 0.3)
    if padded:  # pad slots: past the end of the view
      pads = rng.randint(1, min(2, n))
      index[n - pads:] = [rng.choice(('PAD', size, size + 1))] * pads
    dtype = 'torch.int64' if int64 or not self._chance(rng, 'index', 0.5) else (
        'torch.int32')
    values = '[' + ', '.join(str(i) for i in index) + ']'
    if self._chance(rng, 'index', 0.5):  # an argument, as vLLM's slot_mapping
      arg = f'index{sum(a.startswith("index") for a in self.args)}'
      self.setup.append(
          f'{arg} = torch.tensor({values}, dtype={dtype}, device=device)')
      self.shapes[arg] = (n,)
      self.args.append(arg)
      self.params.append(arg)
      return arg, n, padded
    return (f'torch.tensor({values}, dtype={dtype}, device={name}.device)', n,
            padded)

  @staticmethod
  def _indexed(write, view, dim, index, src):
    """`write` formatted with the index and src; with pad slots in the index,
    the CPU run drops them first (XLA drops them, CPU eager raises)."""
    index, n, padded = index
    src = src.format(n)
    if not padded:
      return write.format(index, src)
    return (f'i, s = in_range({view}, {dim}, {index}, {src}); ' +
            write.format('i', 's'))

  def script(self, compile=True, **parts):
    """The program as a standalone script; `parts` (of PARTS) replace the
    program's own; not `compile`: fn runs eagerly on XLA."""
    p = {k: parts.get(k, getattr(self, k)) for k in PARTS}
    names = [
        n for s in p['setup'] if ' = ' in s
        for n in s.split(' = ')[0].split(', ')
    ]
    families = ', '.join(sorted(self.drawn)) or 'none'
    lines = [
        f'# fuzz_views.py program, seed {self.seed}, families: {families}' +
        ('' if self.families == FAMILIES else
         f' (--families "{",".join(self.families)}")'),
        HARNESS.strip(), '', '', 'def setup(device):'
    ]
    lines += [f'  {s}' for s in p['setup']]
    lines += ['  return dict(' + ', '.join(f'{n}={n}' for n in names) + ')']
    lines += ['', '', f'def fn({", ".join(self.params)}):']
    lines += [f'  {s}' for s in p['body']] or ['  pass']
    if 'compiled2' in p['steps']:  # loops: reads a layer
      lines += ['', '', f'def fn2({", ".join(self.params2)}):']
      lines += [f'  {s}' for s in self.body2]
    for name in ('eager', 'retake', 'pending', 'after'):
      if name in p['steps'] or name == 'after':
        lines += ['', '', f'def {name}({"outs" if name == "after" else "t"}):']
        lines += [f'  {s}' for s in p[name]] or ['  pass']
    args2 = [f'ARGS2 = {self.args2!r}'] if 'compiled2' in p['steps'] else []
    lines += [
        '', '', f'ARGS = {self.args!r}', *args2, f'LOOP = {self.loop!r}',
        f'STATIC = {self.static!r}', f'GRADS = {self.grads!r}',
        f'STEPS = {p["steps"]!r}', f'DYNAMIC = {self.dynamic!r}',
        f'NOGRAD = {self.nograd!r}', f'INFERENCE = {self.inference!r}',
        f'SYNC = {self.sync!r}', f'COMPILE = {compile!r}'
    ]
    return '\n'.join(lines) + MAIN


def failure(text):
  """The line of an exception's text or traceback that names the failure:
  the last one that starts with an exception's name; for an exception with
  no message, with the file and function that raised it."""
  lines = text.splitlines()
  named = [
      i for i, l in enumerate(lines)
      if re.match(r'([\w.]+\.)?\w*(Error|Exception|Failed)\b', l)
  ]
  if not named:
    return (text.strip().splitlines() or [''])[-1].strip()
  line = lines[named[-1]].strip()
  if not line.partition(':')[2].strip():  # where did it come from?
    first = next(i for i in named if lines[i].strip() == line)
    frames = [
        m for m in (re.search(r'File "([^"]*)", line \d+, in (\S+)', l)
                    for l in lines[:first]) if m
    ]
    if frames:
      line += f' (in {os.path.basename(frames[-1][1])}:{frames[-1][2]})'
  return line


def classify(line):
  """The outcome of a program that raised; `line` as given by failure()."""
  if line.startswith('AssertionError: MISMATCH'):
    return 'mismatch'
  if line.startswith('AssertionError: INVALID program: CPU aot_eager'):
    return 'pytorch'
  if line.startswith('AssertionError: INVALID'):
    return 'invalid'
  if line.startswith('NotImplementedError: torch.compile(backend="openxla")'):
    return 'unsupported'
  return 'error'


def same_failure(outcome, detail):
  """What a shrunk program must keep: the outcome, and for an error the
  exception and the start of its message (numbers aside)."""
  if outcome not in ('error', 'unsupported'):
    return outcome
  return outcome + ': ' + re.sub(r'\d+', 'N', detail)[:70]


def verdict(stock, series, pending_deleted=False, same=False):
  """A program's verdict (see the module's doc) from its outcomes, whether
  it has a pending read and the series failed on a deleted buffer, and
  whether both builds failed alike (the same message)."""
  for invalid in ('invalid', 'pytorch'):
    if invalid in (stock, series):
      return invalid
  if series == 'mismatch':
    return 'both' if same and stock == 'mismatch' else 'silent'
  if stock == 'ok':
    if series == 'ok':
      return 'ok'
    return 'limit' if pending_deleted else 'regression'
  return 'fixed' if series in ('ok', 'unsupported') else 'both'


def run_source(source, name):
  """Runs a program's script in this process: (outcome, detail)."""
  import traceback
  import torch._dynamo
  # Dynamo looks globals up by module name: make the program a module.
  module = types.ModuleType(name)
  sys.modules[name] = module
  torch._dynamo.reset()
  try:
    exec(compile(source, f'<{name}>', 'exec'), module.__dict__)
    module.run()
    return 'ok', ''
  except Exception as e:
    detail = failure(''.join(
        traceback.format_exception(type(e), e, e.__traceback__)))
    return classify(detail), detail[:300]


def serve():
  """--worker: imports torch_xla, then forks a runner that runs the scripts
  sent on stdin (a JSON line each, answered by a RESULT line) until one is
  not ok; the next runs in a new runner, forked from this process that ran
  none.  A runner that dies is answered by a DEAD line."""
  results = os.fdopen(os.dup(1), 'w')
  os.dup2(2, 1)  # what the programs print is not ours
  import torch  # noqa: F401
  import torch._dynamo  # noqa: F401
  import torch_xla._dynamo.dynamo_bridge  # noqa: F401
  runs = 0
  while True:
    pid = os.fork()
    if pid == 0:
      while line := sys.stdin.readline():
        runs += 1
        outcome, detail = run_source(json.loads(line), f'fuzz_views_{runs}')
        results.write('RESULT ' + json.dumps([outcome, detail]) + '\n')
        results.flush()
        if outcome != 'ok':
          os._exit(3)
      os._exit(0)
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if status == 0:  # stdin closed
      return
    if status != 3:
      results.write(f'DEAD {status}\n')
      results.flush()


class Child:
  """A --worker process of one build, started on first use and again after
  it hangs: run(source) -> (outcome, detail)."""

  def __init__(self, build):
    self.build, self.proc = build, None

  def run(self, source):
    if self.proc is None:
      python, env = BUILDS[self.build]
      self.proc = subprocess.Popen([python, __file__, '--worker'],
                                   stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL,
                                   bufsize=0,
                                   env=env,
                                   start_new_session=True)
    try:
      self.proc.stdin.write(json.dumps(source).encode() + b'\n')
    except BrokenPipeError:
      pass
    line = None
    if select.select([self.proc.stdout], [], [], TIMEOUT)[0]:
      line = self.proc.stdout.readline().decode()
      if line.startswith('RESULT '):
        return tuple(json.loads(line[7:]))
      if line.startswith('DEAD '):
        return 'dead', f'the process exited with status {line[5:].strip()}'
    self.close()
    return 'dead', 'timeout' if line is None else 'the worker exited'

  def close(self):
    if self.proc is not None:
      try:  # the worker and its runner, by their process group
        os.killpg(self.proc.pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
      self.proc.wait()
      self.proc = None


class Pool:
  """Runs scripts on the builds in `jobs` threads, each with a Child per
  build: map(f, items) calls f(run, item) in them, run(build, source) ->
  (outcome, detail)."""

  def __init__(self, jobs):
    self.local, self.children = threading.local(), []
    self.threads = concurrent.futures.ThreadPoolExecutor(jobs)

  def run(self, build, source):
    if not hasattr(self.local, 'children'):
      self.local.children = {b: Child(b) for b in BUILDS}
      self.children += self.local.children.values()
    return self.local.children[build].run(source)

  def map(self, f, items):
    return self.threads.map(lambda item: f(self.run, item), items)

  def close(self):
    self.threads.shutdown()
    for child in self.children:
      child.close()


def build_envs():
  """{build: (python, environment)}: what `tools/apply_and_test.sh
  [--unpatched] --run` gives a command, for stock torch_xla and the
  series."""
  env = dict(os.environ, PJRT_DEVICE=os.environ.get('PJRT_DEVICE', 'CPU'))
  env.pop('PYTHONPATH', None)  # apply_and_test.sh's, if it started us
  tool = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      'apply_and_test.sh')
  show = 'import json, os, sys; print(json.dumps([sys.executable, {**os.environ}]))'
  for build, options in (('stock', ['--unpatched']), ('series', [])):
    proc = subprocess.run([tool, *options, '--run', 'python', '-c', show],
                          env=env,
                          capture_output=True,
                          text=True)
    if proc.returncode:
      sys.exit(f'fuzz_views: apply_and_test.sh {" ".join(options)} failed:\n'
               f'{proc.stderr}')
    BUILDS[build] = tuple(json.loads(proc.stdout.splitlines()[-1]))


def commits():
  """{build: the commit of the torch_xla checkout it runs}."""
  return {
      b:
          subprocess.run([
              'git', '-C', env['PYTHONPATH'].split(os.pathsep)[-1], 'rev-parse',
              '--short', 'HEAD'
          ],
                         capture_output=True,
                         text=True).stdout.strip()
      for b, (_, env) in BUILDS.items()
  }


def run_alone(build, source):
  """(outcome, detail) of `source` run alone, in a new process."""
  python, env = BUILDS[build]
  try:
    proc = subprocess.run([python, '-c', source],
                          capture_output=True,
                          text=True,
                          env=env,
                          timeout=TIMEOUT)
  except subprocess.TimeoutExpired:
    return 'dead', 'timeout'
  if proc.returncode == 0:
    return 'ok', ''
  if proc.returncode < 0:
    return 'dead', f'the process exited with status {proc.returncode}'
  line = failure(proc.stderr)
  return classify(line), line[:300]


def shrink(program, target, run, budget=80):
  """The script of `program` with statements dropped while it still fails
  the same way (`target`, from same_failure()) when given to `run`."""
  parts = {k: list(getattr(program, k)) for k in PARTS}
  progress = True
  while progress and budget > 0:
    progress = False
    for key in PARTS:
      i = 0
      while i < len(parts[key]) and budget > 0:
        trial = dict(parts, **{key: parts[key][:i] + parts[key][i + 1:]})
        if 'compiled' in trial['steps']:
          budget -= 1
          if same_failure(*run(program.script(**trial))) == target:
            parts, progress = trial, True
            continue
        i += 1
  return program.script(**parts)


def reproduce(run, program, result, shrunk):
  """The report of a failing program, shrunk on the build that fails, then
  run alone on both builds (also put into `result`)."""
  build = 'stock' if result['stock']['outcome'] == 'invalid' else 'series'
  source = program.script()
  if shrunk:
    target = same_failure(result[build]['outcome'], result[build]['detail'])
    source = shrink(program, target, lambda s: run(build, s))
  alone = {b: run_alone(b, source) for b in BUILDS}
  result.update(reproducer=source, alone=alone)
  header = (f"===== seed {result['seed']}: {result['verdict']} "
            f"({', '.join(result['families']) or 'no family'}) =====\n" +
            ''.join(f"{b}: {result[b]['outcome']} {result[b]['detail']}\n"
                    for b in BUILDS) +
            (f'shrunk on the {build}; ' if shrunk else '') + 'run alone: ' +
            '; '.join(f'{b} {" ".join(alone[b])}'.strip() for b in BUILDS))
  return f'{header}\n{source}'


def table(results):
  """Markdown tables: the verdicts per family, the outcomes per build."""
  head = [
      'family', 'programs', *VERDICTS, 'dead stock', 'dead series',
      'series ok of the valid'
  ]
  lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
  groups = [('all', results)] + [
      (f, [r for r in results if f in r['families']]) for f in FAMILIES
  ] + [('none', [r for r in results if not r['families']])]
  for name, group in groups:
    counts = collections.Counter(r['verdict'] for r in group)
    dead = [sum(r[b]['outcome'] == 'dead' for r in group) for b in BUILDS]
    valid = [
        r for r in group if r['verdict'] not in ('xla', 'pytorch', 'invalid')
    ]
    ok = sum(r['series']['outcome'] == 'ok' for r in valid)
    share = f'{ok} ({100 * ok / len(valid):.1f}%)' if valid else '-'
    lines.append('| ' + ' | '.join(
        map(str,
            [name,
             len(group), *(counts[v] for v in VERDICTS), *dead, share])) + ' |')
  kinds = ('ok', 'mismatch', 'error', 'unsupported', 'dead', 'pytorch',
           'invalid')
  lines += [
      '', '| build | ' + ' | '.join(kinds) + ' |', '|---|' + '---|' * len(kinds)
  ]
  for b in BUILDS:
    counts = collections.Counter(r[b]['outcome'] for r in results)
    lines.append(f'| {b} | ' + ' | '.join(str(counts[k]) for k in kinds) + ' |')
  return '\n'.join(lines)


def main():
  parser = argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  add = parser.add_argument
  add('--seed', type=int, default=0, help='first seed')
  add('--count', type=int, default=100, help='programs')
  add('--long', action='store_true', help='2000 programs')
  add('--jobs', type=int, default=2, help='programs run at once')
  add('--show', type=int, metavar='SEED', help='print a program and exit')
  add('--no-shrink', action='store_true', help='print reproducers unshrunk')
  add('--max-reports', type=int, default=10, help='reproducers per verdict')
  add('--families',
      default=','.join(FAMILIES),
      help='the families programs may have (default: all; "" for none)')
  add('--json', help='write the results to this file')
  add('--save', metavar='DIR', help='write reproducers to DIR/fuzz_fail_N.py')
  add('--worker', action='store_true', help=argparse.SUPPRESS)
  args = parser.parse_args()
  families = tuple(f for f in args.families.split(',') if f)
  if set(families) - set(FAMILIES):
    parser.error(f'--families: unknown {set(families) - set(FAMILIES)}')
  if args.worker:
    serve()
    return 0
  if args.show is not None:
    print(Program(args.show, families).script())
    return 0

  start = time.time()
  build_envs()
  tested = commits()
  print(
      f'fuzz_views: stock at {tested["stock"]}, the series at '
      f'{tested["series"]}',
      flush=True)
  count = 2000 if args.long else args.count
  programs = [Program(s, families) for s in range(args.seed, args.seed + count)]
  pool = Pool(args.jobs)
  runs = pool.map(lambda run, job: run(*job),
                  [(b, p.script()) for p in programs for b in BUILDS])
  results, reported, failing = [], collections.Counter(), []
  for program in programs:
    r = dict(seed=program.seed, families=sorted(program.drawn))
    r.update((b, dict(zip(('outcome', 'detail'), next(runs)))) for b in BUILDS)
    r['verdict'] = verdict(
        r['stock']['outcome'], r['series']['outcome'],
        bool(program.pending) and 'is deleted' in r['series']['detail'],
        r['stock']['detail'] == r['series']['detail'])
    results.append(r)
    if r['verdict'] not in ('ok', 'fixed'):
      print(f"seed {r['seed']}: {r['verdict']}: " + '; '.join(
          f"{b} {r[b]['outcome']} {r[b]['detail']}".strip() for b in BUILDS),
            flush=True)
    if r['verdict'] in ('regression', 'silent',
                        'invalid') and (reported[r['verdict']]
                                        < args.max_reports):
      reported[r['verdict']] += 1
      failing.append((program, r))
  both = [(p, r) for p, r in zip(programs, results) if r['verdict'] == 'both']
  for (program, r), (outcome, detail) in zip(  # what eager XLA does
      both,
      pool.map(lambda run, p: run('series', p.script(compile=False)),
               [p for p, _ in both])):
    r['eager xla'] = dict(outcome=outcome, detail=detail)
    if outcome != 'ok':
      r['verdict'] = 'xla'
  limits = [(p, r) for p, r in zip(programs, results) if r['verdict'] == 'limit'
           ]
  for (program, r), (outcome, _) in zip(  # a limit only if ok without the read
      limits,
      pool.map(
          lambda run, p: run(
              'series', p.script(steps=[s for s in p.steps if s != 'pending'])),
          [p for p, _ in limits])):
    if outcome != 'ok':
      r['verdict'] = 'regression'
      print(f"seed {r['seed']}: regression: fails without its pending read too")
  ran = time.time() - start
  for (program, r), report in zip(
      failing,
      pool.map(lambda run, f: reproduce(run, *f, not args.no_shrink), failing)):
    print('\n' + report, flush=True)
    if args.save:
      os.makedirs(args.save, exist_ok=True)
      with open(f'{args.save}/fuzz_fail_{program.seed}.py', 'w') as f:
        f.write(r['reproducer'])
  pool.close()
  counts = collections.Counter(r['verdict'] for r in results)
  summary = dict(programs=len(results), **{v: counts[v] for v in VERDICTS})
  for b in BUILDS:
    summary[f'dead {b}'] = sum(r[b]['outcome'] == 'dead' for r in results)
  summary.update(seconds=round(ran),
                 reproducing=round(time.time() - start - ran))
  if commits() != tested:
    print(f'fuzz_views: warning: the checkouts moved during the run '
          f'({tested} -> {commits()})')
  summary['commits'] = tested
  print('\n' + table(results))
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(dict(summary=summary, programs=results), f, indent=1)
  print(f'\nfuzz_views: {count} programs (seeds {args.seed}..'
        f'{args.seed + count - 1}): ' +
        ', '.join(f'{summary[k]} {k}' for k in list(summary)[1:-3]) +
        f"; {summary['seconds']} s, reproducers {summary['reproducing']} s")
  bad = ('regression', 'silent', 'invalid', 'dead series')
  return 1 if any(summary[k] for k in bad) else 0


if __name__ == '__main__':
  sys.exit(main())
