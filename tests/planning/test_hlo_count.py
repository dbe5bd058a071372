"""daca_jax.planning.hlo_count / hlo_text: the library's own count of an optimized module, checked against
XLA:CPU's loop-exact count of the same programs (the oracle), and the trip counts it infers checked
against the ones XLA:CPU prints."""
import re

import jax
import jax.numpy as jnp
import pytest

from daca_jax.models import init_model, make_logits_fn
from daca_jax.planning import hlo_cost, hlo_count, hlo_text
from daca_jax.config.model import tiny_config

_TRIP = re.compile(r'"known_trip_count":\{"n":"\d+"\},?')


def _looped(x, w):
  inner = lambda c, wi: (jnp.tanh(c @ wi), None)
  y = jax.lax.scan(lambda c, _: (jax.lax.scan(inner, c, w)[0], None), x, None, length=5)[0]
  y = jax.lax.fori_loop(3, 10, lambda i, c: c * 1.5, y)  # 7 trips from a start of 3
  y = jax.lax.while_loop(lambda s: s[0] < 12, lambda s: (s[0] + 2, s[1] * 0.5), (0, y))[1]  # 6 trips, step 2
  return jax.lax.fori_loop(0, 9, lambda i, c: jnp.sin(c), y, unroll=False)


def _doubling(x):  # a counter that doubles: 10 trips, which no constant step describes
  return jax.lax.while_loop(lambda s: s[0] < 1024, lambda s: (s[0] * 2, s[1] @ s[1]), (1, x))[1]


def test_inferred_trip_counts_equal_the_ones_xla_prints():
  args = (jax.ShapeDtypeStruct((16, 32), jnp.float32), jax.ShapeDtypeStruct((3, 32, 32), jnp.float32))
  text = jax.jit(_looped).lower(*args).compile().as_text()
  printed = sorted((lp.trip, lp.annotated) for lp in hlo_text.parse(text).loops())
  assert [t for t, _ in printed] == [3, 5, 6, 7, 9] and all(a for _, a in printed)
  stripped = _TRIP.sub("", text)  # as XLA:TPU prints its modules: no annotation
  assert "known_trip_count" not in stripped
  inferred = sorted((lp.trip, lp.annotated) for lp in hlo_text.parse(stripped).loops())
  assert inferred == [(3, False), (5, False), (6, False), (7, False), (9, False)]
  # and the counts made from them are the annotated module's
  assert hlo_count.count(stripped) == hlo_count.count(text)
  # a counter without a constant step is unknown (counted once and reported), never a guess
  doubling = jax.jit(_doubling).lower(jax.ShapeDtypeStruct((8, 8), jnp.float32)).compile().as_text()
  assert [lp.trip for lp in hlo_text.parse(_TRIP.sub("", doubling)).loops()] == [0]


@pytest.mark.parametrize("remat", ["none", "full"])
def test_own_count_equals_xla_on_the_models_programs(remat):
  graphdef, params = init_model(tiny_config(n_layers=3, remat=remat), 0)
  fn = make_logits_fn(graphdef)
  toks = jnp.zeros((2, 16), jnp.int32)
  for f in (jax.jit(fn), jax.jit(jax.grad(lambda p, t: fn(p, t).sum()))):
    compiled = f.lower(params, toks).compile()
    xla = hlo_cost.program_cost(compiled)  # XLA:CPU's analysis, every loop body counted per trip
    own = hlo_count.count(compiled.as_text())
    assert xla.loops and xla.exact_loops
    assert own.flops == pytest.approx(xla.flops, rel=1e-4)
    assert own.transcendentals == pytest.approx(xla.transcendentals, rel=1e-6)
    # bytes: XLA's fusion accounting differs from the library's in small ways (constants, layouts)
    assert own.bytes_accessed == pytest.approx(xla.bytes_accessed, rel=0.03)
    once = hlo_count.count(compiled.as_text(), loops_once=True)
    assert once.flops == pytest.approx(hlo_cost._plain(compiled)["flops"], rel=1e-4)


# XLA:TPU's form of a batched matrix product: the batch dimensions are convolution windows dilated so
# that one window position lands on an input element ([4, 2] batches of [80, 16] @ [16, 80]).
_TPU_BATCHED = """HloModule m

ENTRY %main (a: bf16[4,2,80,4,16], b: bf16[4,2,80,4,16]) -> f32[4,2,4,80,80] {
  %a = bf16[4,2,80,4,16]{4,3,2,1,0} parameter(0)
  %b = bf16[4,2,80,4,16]{4,3,2,1,0} parameter(1)
  ROOT %c = f32[4,2,4,80,80]{4,3,2,1,0} convolution(%a, %b), window={size=4x2x4 stride=3x1x3 lhs_dilate=4x2x4}, dim_labels=01b2f_01o2i->012bf
}
"""
# XLA:GPU's: a cuBLASLt GEMM custom-call, whose result carries a 32 MB workspace.
_GPU_GEMM = """HloModule m

ENTRY %main (a: bf16[512,4096], w: bf16[4096,1024]) -> bf16[512,1024] {
  %a = bf16[512,4096]{1,0} parameter(0)
  %w = bf16[4096,1024]{1,0} parameter(1)
  %g = (bf16[512,1024]{1,0}, s8[33554432]{0}) custom-call(%a, %w), custom_call_target="__cublas$lt$matmul", backend_config={"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]}}}
  ROOT %o = bf16[512,1024]{1,0} get-tuple-element(%g), index=0
}
"""


def test_tpu_batched_convolution_counts_one_window_position_per_output():
  got = hlo_count.count(_TPU_BATCHED)
  assert got.flops == 2 * (4 * 2) * 4 * 80 * 80 * 16  # [4,2] x 4 batches of an 80 x 16 x 80 product
  assert got.bytes_accessed == 2 * (4 * 2 * 80 * 4 * 16 * 2) + 4 * 2 * 4 * 80 * 80 * 4


def test_gpu_gemm_custom_call_counts_its_product_not_its_workspace():
  got = hlo_count.count(_GPU_GEMM)
  assert got.flops == 2 * 512 * 4096 * 1024
  assert got.bytes_accessed == (512 * 4096 + 4096 * 1024 + 512 * 1024) * 2


def test_in_place_update_of_a_stacked_buffer_costs_the_update():
  # A layer scan writing one row of a [64, 1024] stack per step: XLA updates it in place, so a step moves
  # one row, not the stack.
  def f(x):
    def body(c, i):
      stack, h = c
      h = jnp.tanh(h)
      return (jax.lax.dynamic_update_index_in_dim(stack, h, i, 0), h), None
    return jax.lax.scan(body, (jnp.zeros((64, 1024)), x), jnp.arange(64))[0][0]

  compiled = jax.jit(f).lower(jax.ShapeDtypeStruct((1024,), jnp.float32)).compile()
  own = hlo_count.count(compiled.as_text())
  assert own.bytes_accessed < 64 * 64 * 1024 * 4 / 4  # far below the stack read and written per step
  assert own.bytes_accessed == pytest.approx(hlo_cost.program_cost(compiled).bytes_accessed, rel=0.1)
