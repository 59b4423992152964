#!/usr/bin/env python3
"""End-to-end greedy decoding with a compiled, donating decode step.

A small LlamaForCausalLM (transformers, random weights from a fixed seed, no
download) decodes greedily with `torch.compile(step, backend="openxla")`; the
step marks every KV-cache tensor it writes for buffer donation
(torch.ops.xla.dynamo_set_buffer_donor_).  Cache layouts:

  a   transformers' StaticCache, as it comes (one static tensor per layer's
      keys and per layer's values)
  b   StaticCache whose keys/values are views of one allocation: a pool of
      shape (layers, 2, batch, heads, seq, head size), layer l's keys and
      values replaced by pool[l, 0] and pool[l, 1] (marked static, as
      StaticLayer does)
  c1  paged cache, vLLM's write: key_cache.flatten(0, 1).index_copy_(0,
      slot_mapping, key) on (blocks, block size, heads, head size), one
      kv_cache of shape (2, blocks, ...) per layer, key_cache, value_cache =
      kv_cache; the attention reads the sequence's slots back (index_select)
  c2  the same paged cache, every layer's key_cache and value_cache views of
      one allocation of shape (layers, 2, blocks, ...)

Layouts c run the Llama's own modules (embedding, norms, projections, rotary
embedding, MLP, head) in a small decoder loop written here, so that the
attention can write and read a paged cache.  Their slot_mapping is padded to
4 entries with an out-of-range slot, as vLLM pads it: XLA drops those writes;
the CPU reference, where index_copy_ would fail on them, leaves them out (a
pad write that landed anywhere would show in the cache comparison).

The prompt is fed one token per step through the same step (those steps are
the warm-up); then --tokens tokens are generated.  Every layout runs in a
child process, first eagerly on the CPU (the reference), then compiled on
the XLA device, and the table shows: tokens equal (or the first step that
differs), the largest difference over every cache tensor (bases and views),
ms per token, XLA executions per token (metric ExecuteTime), compilations
after the warm-up (metric CompileTime) -- or the error that ended the run.

  tools/apply_and_test.sh --unpatched --run python tools/decode_demo.py
  tools/apply_and_test.sh --run python tools/decode_demo.py --json out.json
  tools/apply_and_test.sh --run python tools/decode_demo.py --tokens 4 \\
      --layouts a,c1                                        (smoke, ~1 min)
  tools/apply_and_test.sh [--unpatched] --run python tools/decode_demo.py \\
      --layouts a --cache-len 8192    (a long StaticCache: what a write costs)

Exit status: 0 when every layout matches the reference, 1 otherwise.
"""
import argparse
import json
import os
import subprocess
import sys
import time
import traceback

LAYOUTS = ('a', 'b', 'c1', 'c2')
PROMPT = (1, 7, 42)  # fed one token per step: the warm-up
HEADS, KV_HEADS, VOCAB = 4, 2, 512
BLOCK_SIZE, PAD_TO, PAD_SLOT = 8, 4, 1_000_000_000
CACHE_ATOL = 1e-4


def build_model(layers, hidden):
  import torch
  from transformers import LlamaConfig, LlamaForCausalLM
  torch.manual_seed(0)
  config = LlamaConfig(vocab_size=VOCAB,
                       hidden_size=hidden,
                       intermediate_size=2 * hidden,
                       num_hidden_layers=layers,
                       num_attention_heads=HEADS,
                       num_key_value_heads=KV_HEADS,
                       max_position_embeddings=256,
                       attn_implementation='eager',
                       initializer_range=0.1)  # else it repeats one token
  return LlamaForCausalLM(config).eval()


class StaticDecoder:
  """Layouts a and b: the model's forward with a StaticCache."""

  def __init__(self, model, layout, max_len, device):
    import torch
    from transformers import StaticCache
    self.model = model
    config = model.config
    head_dim = config.hidden_size // HEADS
    self.cache = StaticCache(config=config, max_cache_len=max_len)
    self.cache.early_initialization(1, KV_HEADS, head_dim, torch.float32,
                                    device)
    self.tensors = {}
    if layout == 'b':
      pool = torch.zeros(
          (len(self.cache.layers), 2, 1, KV_HEADS, max_len, head_dim),
          device=device)
      for l, layer in enumerate(self.cache.layers):
        layer.keys, layer.values = pool[l, 0], pool[l, 1]
        torch._dynamo.mark_static_address(layer.keys)
        torch._dynamo.mark_static_address(layer.values)
      self.tensors['pool'] = pool
    for l, layer in enumerate(self.cache.layers):
      self.tensors[f'keys{l}'] = layer.keys
      self.tensors[f'values{l}'] = layer.values

  def inputs(self, token, pos, device):
    import torch
    return (self.model, self.cache, token, torch.tensor([[pos]]).to(device))

  @staticmethod
  def step(model, cache, token, position_ids):
    import torch
    if token.device.type == 'xla':
      for layer in cache.layers:
        torch.ops.xla.dynamo_set_buffer_donor_(layer.keys, True)
        torch.ops.xla.dynamo_set_buffer_donor_(layer.values, True)
    logits = model(input_ids=token,
                   cache=cache,
                   position_ids=position_ids,
                   use_cache=True).logits
    return logits[:, -1].argmax(-1, keepdim=True)


class PagedDecoder:
  """Layouts c1 and c2: a decoder loop over the model's modules, with a
  paged cache written and read as vLLM does."""

  def __init__(self, model, layout, max_len, device):
    import torch
    self.model = model
    layers = model.config.num_hidden_layers
    head_dim = model.config.hidden_size // HEADS
    blocks = 2 * -(-max_len // BLOCK_SIZE)
    shape = (2, blocks, BLOCK_SIZE, KV_HEADS, head_dim)
    if layout == 'c1':
      kv_caches = [torch.zeros(shape, device=device) for _ in range(layers)]
      self.tensors = {f'kv_cache{l}': c for l, c in enumerate(kv_caches)}
    else:
      pool = torch.zeros((layers,) + shape, device=device)
      kv_caches = list(pool)
      self.tensors = {'pool': pool}
    # Taken once, as a serving loop does, and passed in at every step.
    self.kv = [tuple(kv_cache) for kv_cache in kv_caches]
    for l, (key_cache, value_cache) in enumerate(self.kv):
      self.tensors[f'key_cache{l}'] = key_cache
      self.tensors[f'value_cache{l}'] = value_cache
    # The sequence's blocks, scattered over the cache: slot of position p.
    block_table = torch.randperm(blocks,
                                 generator=torch.Generator().manual_seed(1))
    positions = torch.arange(max_len)
    self.slot_of = (block_table[positions // BLOCK_SIZE] * BLOCK_SIZE +
                    positions % BLOCK_SIZE)
    self.seq_slots = self.slot_of.to(device)

  def inputs(self, token, pos, device):
    import torch
    slots = torch.full((PAD_TO,), PAD_SLOT)
    slots[0] = self.slot_of[pos]
    return (self.model, self.kv, token, torch.tensor([pos]).to(device),
            slots.to(device), self.seq_slots)

  @staticmethod
  def step(model, kv, token, pos, slot_mapping, seq_slots):
    import torch
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    if token.device.type == 'xla':
      for key_cache, value_cache in kv:
        torch.ops.xla.dynamo_set_buffer_donor_(key_cache, True)
        torch.ops.xla.dynamo_set_buffer_donor_(value_cache, True)
    else:  # index_copy_ on the CPU fails on the pad slots XLA drops
      keep = slot_mapping < kv[0][0].shape[0] * kv[0][0].shape[1]
    lm = model.model
    x = lm.embed_tokens(token)  # (1, 1, hidden)
    cos, sin = lm.rotary_emb(x, pos[None])
    visible = torch.arange(seq_slots.shape[0], device=pos.device) <= pos
    for layer, (key_cache, value_cache) in zip(lm.layers, kv):
      attn = layer.self_attn
      h = layer.input_layernorm(x)
      q = attn.q_proj(h).view(1, 1, HEADS, -1).transpose(1, 2)
      k = attn.k_proj(h).view(1, 1, KV_HEADS, -1).transpose(1, 2)
      q, k = apply_rotary_pos_emb(q, k, cos, sin)
      v = attn.v_proj(h).view(1, KV_HEADS, -1)
      for cache, new in ((key_cache, k[0].transpose(0, 1)), (value_cache, v)):
        # Padded to PAD_TO tokens, as the batch of a serving step is.
        new = torch.cat([new, new.new_zeros((PAD_TO - 1,) + new.shape[1:])])
        flat = cache.flatten(0, 1)
        if token.device.type == 'xla':
          flat.index_copy_(0, slot_mapping, new)
        else:
          flat.index_copy_(0, slot_mapping[keep], new[keep])
      groups = HEADS // KV_HEADS
      keys = key_cache.flatten(0, 1).index_select(0, seq_slots)
      values = value_cache.flatten(0, 1).index_select(0, seq_slots)
      keys = keys.repeat_interleave(groups, 1).transpose(0, 1)  # (H, S, D)
      values = values.repeat_interleave(groups, 1).transpose(0, 1)
      scores = (q[0] @ keys.transpose(1, 2)) * attn.scaling  # (H, 1, S)
      scores = scores.masked_fill(~visible, float('-inf')).softmax(-1)
      out = (scores @ values).transpose(0, 1).reshape(1, 1, -1)
      x = x + attn.o_proj(out)
      x = x + layer.mlp(layer.post_attention_layernorm(x))
    logits = model.lm_head(lm.norm(x))
    return logits[:, -1].argmax(-1, keepdim=True)


def decode(layout, args, device):
  """Runs the prompt then args.tokens greedy steps on DEVICE (compiled on
  XLA); returns the tokens, the cache tensors on the CPU and the figures."""
  import torch
  model = build_model(args.layers, args.hidden).to(device)
  max_len = len(PROMPT) + args.tokens
  kind = StaticDecoder if layout in ('a', 'b') else PagedDecoder
  decoder = kind(
      model, layout,
      max(max_len, args.cache_len) if kind is StaticDecoder else max_len,
      device)
  xla = device != 'cpu'
  if xla:
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    step = torch.compile(kind.step, backend='openxla')
  else:
    step = kind.step

  def run(token, pos):
    token = step(*decoder.inputs(token, pos, device))
    if xla:
      torch_xla.sync()
      xm.wait_device_ops()
    return token

  with torch.no_grad():
    for pos, t in enumerate(PROMPT):
      token = run(torch.tensor([[t]]).to(device), pos)
    if xla:
      met.clear_metrics()
      compiles = (met.metric_data('CompileTime') or [0])[0]
    tokens = [token]
    start = time.perf_counter()
    for pos in range(len(PROMPT), max_len - 1):
      tokens.append(run(tokens[-1], pos))
    steps = len(tokens) - 1
    result = dict(ms_per_token=(time.perf_counter() - start) * 1e3 / steps)
  if xla:  # before reading the results back, which runs more
    result['executions_per_token'] = (met.metric_data('ExecuteTime') or
                                      [0])[0] / steps
    result['compiles_after_warmup'] = (met.metric_data('CompileTime') or
                                       [0])[0] - compiles
  result['tokens'] = torch.cat(tokens).flatten().tolist()
  result['cache'] = {n: t.cpu() for n, t in decoder.tensors.items()}
  return result


def child(layout, args):
  """Prints RESULT {json}: the comparison of LAYOUT with the reference."""
  import torch_xla
  reference = decode(layout, args, 'cpu')
  try:
    got = decode(layout, args, torch_xla.device())
  except Exception as e:  # shown in the table; the other layouts go on
    message = (str(e).strip().splitlines() or [''])[0][:80]
    where = traceback.extract_tb(e.__traceback__)[-1]
    print('RESULT ' + json.dumps(
        dict(error=f'{type(e).__name__} in {os.path.basename(where.filename)}'
             f':{where.lineno}: {message}'.rstrip(': '))))
    return
  differ = [
      i for i, (a, b) in enumerate(zip(reference['tokens'], got['tokens']))
      if a != b
  ]
  diff = max((got['cache'][n] - t).abs().max().item()
             for n, t in reference['cache'].items())
  print('RESULT ' + json.dumps(
      dict(tokens=got['tokens'],
           reference_tokens=reference['tokens'],
           tokens_equal=not differ,
           first_differing_step=differ[0] if differ else None,
           cache_max_abs_diff=diff,
           cache_equal=diff <= CACHE_ATOL,
           ms_per_token=got['ms_per_token'],
           reference_ms_per_token=reference['ms_per_token'],
           executions_per_token=got['executions_per_token'],
           compiles_after_warmup=got['compiles_after_warmup'])))


def run_layout(layout, argv):
  start = time.perf_counter()
  proc = subprocess.run([sys.executable, __file__, '--child', layout] + argv,
                        capture_output=True,
                        text=True)
  row = dict(layout=layout)
  for line in proc.stdout.splitlines():
    if line.startswith('RESULT '):
      row.update(json.loads(line[7:]))
      break
  else:
    last = (proc.stderr.strip().splitlines() or [''])[-1]
    row['error'] = f'exit {proc.returncode}: {last[:100]}'
  row['seconds'] = time.perf_counter() - start
  return row


def print_table(rows):
  row = '{:8}{:15}{:18}{:>9}{:>12}{:>10}'.format
  print(
      row('layout', 'tokens equal', 'cache max|diff|', 'ms/token', 'exec/token',
          'compiles'))
  for r in rows:
    if 'error' in r:
      print(f"{r['layout']:8}{r['error']}")
      continue
    tokens = ('yes' if r['tokens_equal'] else
              f"no (step {r['first_differing_step']})")
    cache = f"{r['cache_max_abs_diff']:.2e}"
    print(
        row(r['layout'], tokens,
            cache if r['cache_equal'] else cache + ' WRONG',
            f"{r['ms_per_token']:.2f}", f"{r['executions_per_token']:.2f}",
            r['compiles_after_warmup']))


def main():
  ap = argparse.ArgumentParser(
      description=__doc__.split('\n\n')[0],
      formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument('--tokens',
                  type=int,
                  default=32,
                  help='tokens to generate after the prompt (default 32)')
  ap.add_argument('--layers', type=int, default=2, choices=(1, 2, 3, 4))
  ap.add_argument('--hidden',
                  type=int,
                  default=128,
                  help='hidden size, a multiple of 8 (default 128)')
  ap.add_argument('--cache-len',
                  type=int,
                  default=0,
                  help="StaticCache's max_cache_len in layouts a and b "
                  '(default: the prompt and the tokens)')
  ap.add_argument('--layouts',
                  default=','.join(LAYOUTS),
                  help=f"comma list of {', '.join(LAYOUTS)} (default all)")
  ap.add_argument('--json', help='write the rows to this file')
  ap.add_argument('--child', help=argparse.SUPPRESS)
  args = ap.parse_args()
  layouts = args.layouts.split(',')
  if not set(layouts) <= set(LAYOUTS):
    ap.error(f'--layouts: a comma list of {", ".join(LAYOUTS)}')
  if args.tokens < 2 or args.hidden % 8:
    ap.error('--tokens: at least 2; --hidden: a multiple of 8')
  if args.child:
    return child(args.child, args)
  argv = [
      f'--tokens={args.tokens}', f'--layers={args.layers}',
      f'--hidden={args.hidden}', f'--cache-len={args.cache_len}'
  ]
  rows = [run_layout(layout, argv) for layout in layouts]
  print_table(rows)
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(rows, f, indent=1)
  return 0 if all(
      r.get('tokens_equal') and r.get('cache_equal') for r in rows) else 1


if __name__ == '__main__':
  sys.exit(main())
