// Op definitions and shape functions of FlashAttn>FlashAttention, its gradient, and
// FlashAttn>NextSeed (a Keras seed generator's next seed in one op).
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tf_flashattn {

using ::tensorflow::Status;
using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

namespace {

// query [B, Tq, H, D], key [B, Tk, Hkv, D], value [B, Tk, Hkv, Dv]; outputs B, Tq, H, Dv, Tk.
Status AttentionDims(InferenceContext* c, DimensionHandle* b, DimensionHandle* tq,
                     DimensionHandle* h, DimensionHandle* dv, DimensionHandle* tk) {
  ShapeHandle q, k, v;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &q));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 4, &k));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 4, &v));
  DimensionHandle unused;
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(q, 0), c->Dim(k, 0), b));
  TF_RETURN_IF_ERROR(c->Merge(*b, c->Dim(v, 0), b));
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(k, 1), c->Dim(v, 1), tk));
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(k, 2), c->Dim(v, 2), &unused));
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(q, 3), c->Dim(k, 3), &unused));
  *tq = c->Dim(q, 1);
  *h = c->Dim(q, 2);
  *dv = c->Dim(v, 3);
  return ::tensorflow::OkStatus();
}

}  // namespace

#define FLASH_ATTN_COMMON_INPUTS                                                      \
  Input("query: T")               /* [B, Tq, H, D] */                                 \
      .Input("key: T")            /* [B, Tk, Hkv, D] */                               \
      .Input("value: T")          /* [B, Tk, Hkv, Dv] */                              \
      .Input("mask: bool")        /* broadcastable to [B, H, Tq, Tk], or [0] */       \
      .Input("bias: T")           /* broadcastable to [B, H, Tq, Tk], or [0] */       \
      .Input("query_lengths: int32") /* [B] or [0] */                                 \
      .Input("key_lengths: int32")   /* [B] or [0] */                                 \
      .Input("query_valid: bool")    /* [B, Tq] or [0] */                             \
      .Input("key_valid: bool")      /* [B, Tk] or [0] */                             \
      .Input("seed: int64")          /* [2], or [0] without dropout */

#define FLASH_ATTN_COMMON_ATTRS                                 \
  Attr("T: {half, bfloat16, float, double}")                    \
      .Attr("scale: float")                                     \
      .Attr("softcap: float = 0.0")                             \
      .Attr("causal: bool = false")                             \
      .Attr("causal_offset: int = 0")                           \
      .Attr("window_left: int = -1")                            \
      .Attr("window_right: int = -1")                           \
      .Attr("dropout_rate: float = 0.0")

REGISTER_OP("FlashAttn>FlashAttention")
    .FLASH_ATTN_COMMON_INPUTS
    .Output("output: T")  // [B, Tq, H, Dv]
    .Output("lse: float")  // [B, H, Tq]
    .FLASH_ATTN_COMMON_ATTRS
    .SetShapeFn([](InferenceContext* c) {
      DimensionHandle b, tq, h, dv, tk;
      TF_RETURN_IF_ERROR(AttentionDims(c, &b, &tq, &h, &dv, &tk));
      c->set_output(0, c->MakeShape({b, tq, h, dv}));
      c->set_output(1, c->MakeShape({b, h, tq}));
      return ::tensorflow::OkStatus();
    })
    .Doc(R"doc(
Exact attention by the FlashAttention algorithm (tiled, online softmax, O(N) extra memory).
output[b, i, h] = sum_j softmax_j(logit(b, h, i, j)) * value[b, j, h // (H / Hkv)], where
logit = softcap(scale * q.k) + bias over the visible keys; rows that see no key give 0.
lse is the natural log-sum-exp of the visible logits per row (-inf for a row with none).
)doc");

REGISTER_OP("FlashAttn>FlashAttentionGrad")
    .FLASH_ATTN_COMMON_INPUTS
    .Input("output: T")    // [B, Tq, H, Dv]
    .Input("lse: float")   // [B, H, Tq]
    .Input("d_output: T")  // [B, Tq, H, Dv]
    .Input("d_lse: float")  // [B, H, Tq] or [0]
    .Output("d_query: T")  // [B, Tq, H, D]
    .Output("d_key: T")    // [B, Tk, Hkv, D]
    .Output("d_value: T")  // [B, Tk, Hkv, Dv]
    .Output("d_logits: float")  // [B, H, Tq, Tk] when a bias is given, else [0]
    .FLASH_ATTN_COMMON_ATTRS
    .SetShapeFn([](InferenceContext* c) {
      DimensionHandle b, tq, h, dv, tk;
      TF_RETURN_IF_ERROR(AttentionDims(c, &b, &tq, &h, &dv, &tk));
      c->set_output(0, c->input(0));
      c->set_output(1, c->input(1));
      c->set_output(2, c->input(2));
      ShapeHandle bias = c->input(4);
      if (c->RankKnown(bias) && c->Rank(bias) == 4) {
        c->set_output(3, c->MakeShape({b, h, tq, tk}));
      } else if (c->RankKnown(bias) && c->Rank(bias) == 1) {
        c->set_output(3, c->MakeShape({0}));
      } else {
        c->set_output(3, c->UnknownShape());
      }
      return ::tensorflow::OkStatus();
    });

// The dropout seed of an eager training step in one op (tf_flashattn/seeds.py, next_seed): what a
// Keras SeedGenerator's next() returns, from its int64 [2] state variable, the state then advanced
// by [0, 1] as next() does. Eagerly, the read and the update are two dispatches; this is one.
REGISTER_OP("FlashAttn>NextSeed")
    .Input("state: resource")  // an int64 [2] resource variable
    .Output("seed: int64")     // [2]: the state before the call
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->MakeShape({2}));
      return ::tensorflow::OkStatus();
    })
    .Doc(R"doc(
seed = state; state = state + [0, 1] (int64, wrapping), as keras.random.SeedGenerator.next().
)doc");

}  // namespace tf_flashattn
