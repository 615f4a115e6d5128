// weact-train: trains the demo's qwen3-shaped base model, or one LoRA adapter over it, on tokenized samples
// with a per-token loss mask (the stage-segmented objective: each sample supervises only its own capability's
// turns). It builds the transformer's graph itself on ggml, so every projection (attn_k and attn_v included)
// gets its gradient: llama.cpp's own training graph writes K and V into the KV cache, where backpropagation
// stops. The graph is checked against llama.cpp's qwen3 forward pass by `npm run train-demo` (log-probs of
// the trained files through node-llama-cpp equal this program's within float rounding).
//
//   weact-train --model M.gguf [--lora L.gguf] --data S.bin --out O.gguf [options]   train
//   weact-train --model M.gguf [--lora L.gguf] --eval S.bin [--logprobs-out F]       loss and accuracy
//
// Samples file (little-endian): "WTS1", u32 count, then per sample u32 n, u32 tokens[n], u8 mask[n];
// mask[i] = 1 makes token i a target, predicted from the tokens before it. A sample is one training window:
// attention never crosses from one sample into another.
#include "ggml.h"
#include "ggml-cpu.h"
#include "gguf.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct Options {
    std::string model, lora, data, out, eval, logprobs_out;
    int epochs = 1, batch = 8, threads = 2, warmup = 20, log_every = 20;
    float lr = 1e-3f, min_lr_ratio = 0.1f, weight_decay = 0.0f, clip = 1.0f, beta1 = 0.9f, beta2 = 0.99f;
    uint32_t seed = 1;
    size_t mem_mb = 8192;
    int max_steps = 0;
};

[[noreturn]] void fail(const std::string & msg) {
    fprintf(stderr, "weact-train: %s\n", msg.c_str());
    exit(1);
}

Options parse(int argc, char ** argv) {
    Options o;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) fail("missing value after " + a);
            return argv[++i];
        };
        if (a == "--model") o.model = next();
        else if (a == "--lora") o.lora = next();
        else if (a == "--data") o.data = next();
        else if (a == "--out") o.out = next();
        else if (a == "--eval") o.eval = next();
        else if (a == "--logprobs-out") o.logprobs_out = next();
        else if (a == "--epochs") o.epochs = std::stoi(next());
        else if (a == "--batch") o.batch = std::stoi(next());
        else if (a == "--threads") o.threads = std::stoi(next());
        else if (a == "--warmup") o.warmup = std::stoi(next());
        else if (a == "--log-every") o.log_every = std::stoi(next());
        else if (a == "--max-steps") o.max_steps = std::stoi(next());
        else if (a == "--lr") o.lr = std::stof(next());
        else if (a == "--min-lr-ratio") o.min_lr_ratio = std::stof(next());
        else if (a == "--weight-decay") o.weight_decay = std::stof(next());
        else if (a == "--clip") o.clip = std::stof(next());
        else if (a == "--seed") o.seed = (uint32_t) std::stoul(next());
        else if (a == "--mem-mb") o.mem_mb = std::stoul(next());
        else fail("unknown option " + a);
    }
    if (o.model.empty()) fail("--model is required");
    if (o.eval.empty() && (o.data.empty() || o.out.empty())) fail("training needs --data and --out (or --eval to measure)");
    return o;
}

struct Sample {
    std::vector<int32_t> tokens;
    std::vector<int32_t> targets;  // positions p whose output predicts tokens[p + 1]
};

std::vector<Sample> read_samples(const std::string & path) {
    FILE * f = fopen(path.c_str(), "rb");
    if (!f) fail("cannot open " + path);
    char magic[4];
    uint32_t count = 0;
    if (fread(magic, 1, 4, f) != 4 || memcmp(magic, "WTS1", 4) != 0 || fread(&count, 4, 1, f) != 1) fail(path + ": not a samples file");
    std::vector<Sample> out(count);
    for (auto & s : out) {
        uint32_t n = 0;
        if (fread(&n, 4, 1, f) != 1 || n < 2) fail(path + ": truncated or empty sample");
        std::vector<uint32_t> tok(n);
        std::vector<uint8_t> mask(n);
        if (fread(tok.data(), 4, n, f) != n || fread(mask.data(), 1, n, f) != n) fail(path + ": truncated sample");
        s.tokens.assign(tok.begin(), tok.end());
        for (uint32_t i = 1; i < n; i++) if (mask[i]) s.targets.push_back((int32_t) i - 1);
    }
    fclose(f);
    return out;
}

struct Hparams {
    int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx, n_vocab;
    float eps, rope_base;
};

struct Layer {
    ggml_tensor *attn_norm, *wq, *wk, *wv, *wo, *q_norm, *k_norm, *ffn_norm, *gate, *up, *down;
};

struct Model {
    gguf_context * gguf = nullptr;
    ggml_context * ctx = nullptr;
    Hparams hp{};
    ggml_tensor *tok_embd, *output_norm, *output;
    std::vector<Layer> layers;
};

int64_t key_of(gguf_context * g, const std::string & key) {
    int64_t id = gguf_find_key(g, key.c_str());
    if (id < 0) fail("the model has no " + key);
    return id;
}

ggml_tensor * tensor_of(ggml_context * ctx, const std::string & name) {
    ggml_tensor * t = ggml_get_tensor(ctx, name.c_str());
    if (!t) fail("no tensor " + name);
    if (t->type != GGML_TYPE_F32) fail(name + " is not F32: the trainer reads and writes F32 weights");
    return t;
}

Model load_model(const std::string & path) {
    Model m;
    gguf_init_params params{false, &m.ctx};
    m.gguf = gguf_init_from_file(path.c_str(), params);
    if (!m.gguf) fail("cannot read " + path);
    std::string arch = gguf_get_val_str(m.gguf, key_of(m.gguf, "general.architecture"));
    if (arch != "qwen3") fail(path + " is " + arch + "; the trainer builds qwen3 graphs");
    auto u32 = [&](const std::string & k) { return (int) gguf_get_val_u32(m.gguf, key_of(m.gguf, arch + "." + k)); };
    auto f32 = [&](const std::string & k) { return gguf_get_val_f32(m.gguf, key_of(m.gguf, arch + "." + k)); };
    m.hp = {u32("embedding_length"), u32("block_count"), u32("attention.head_count"), u32("attention.head_count_kv"), u32("attention.key_length"), u32("feed_forward_length"), u32("context_length"), 0,
            f32("attention.layer_norm_rms_epsilon"), f32("rope.freq_base")};
    m.tok_embd = tensor_of(m.ctx, "token_embd.weight");
    m.output_norm = tensor_of(m.ctx, "output_norm.weight");
    m.output = tensor_of(m.ctx, "output.weight");
    m.hp.n_vocab = (int) m.tok_embd->ne[1];
    for (int l = 0; l < m.hp.n_layer; l++) {
        auto t = [&](const char * s) { return tensor_of(m.ctx, "blk." + std::to_string(l) + "." + s + ".weight"); };
        m.layers.push_back({t("attn_norm"), t("attn_q"), t("attn_k"), t("attn_v"), t("attn_output"), t("attn_q_norm"), t("attn_k_norm"), t("ffn_norm"), t("ffn_gate"), t("ffn_up"), t("ffn_down")});
    }
    return m;
}

/** A LoRA over the base's projections: W x + scale * B (A x), with scale = alpha / rank, as llama.cpp applies it. */
struct Lora {
    gguf_context * gguf = nullptr;
    ggml_context * ctx = nullptr;
    std::map<const ggml_tensor *, std::pair<ggml_tensor *, ggml_tensor *>> ab;  // base weight -> (a, b)
    float scale = 1.0f;
};

Lora load_lora(const std::string & path, const Model & m) {
    Lora lo;
    gguf_init_params params{false, &lo.ctx};
    lo.gguf = gguf_init_from_file(path.c_str(), params);
    if (!lo.gguf) fail("cannot read " + path);
    float alpha = gguf_get_val_f32(lo.gguf, key_of(lo.gguf, "adapter.lora.alpha"));
    int rank = 0;
    for (int64_t i = 0; i < gguf_get_n_tensors(lo.gguf); i++) {
        std::string name = gguf_get_tensor_name(lo.gguf, i);
        const std::string suffix = ".lora_a";
        if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
        std::string base = name.substr(0, name.size() - suffix.size());
        ggml_tensor * w = ggml_get_tensor(m.ctx, base.c_str());
        if (!w) fail(path + ": " + name + " targets no tensor of the model");
        ggml_tensor * a = tensor_of(lo.ctx, base + ".lora_a");
        ggml_tensor * b = tensor_of(lo.ctx, base + ".lora_b");
        if (a->ne[0] != w->ne[0] || b->ne[1] != w->ne[1] || a->ne[1] != b->ne[0]) fail(path + ": " + base + " has the wrong shape");
        rank = (int) a->ne[1];
        lo.ab[w] = {a, b};
    }
    if (lo.ab.empty()) fail(path + " has no lora_a/lora_b tensors");
    lo.scale = alpha / (float) rank;
    return lo;
}

/** One sample's graph lives in this buffer; left uninitialised, so only the pages a graph touches are mapped. */
struct Arena {
    size_t bytes;
    std::unique_ptr<char[]> data;
    explicit Arena(size_t mb) : bytes(mb << 20), data(new char[mb << 20]) {}
};

struct Graph {
    ggml_cgraph * gf;
    ggml_tensor *tokens, *targets, *labels, *loss, *logits;
};

ggml_tensor * project(ggml_context * ctx, const Lora * lora, ggml_tensor * w, ggml_tensor * x) {
    ggml_tensor * y = ggml_mul_mat(ctx, w, x);
    if (lora) {
        auto it = lora->ab.find(w);
        if (it != lora->ab.end()) y = ggml_add(ctx, y, ggml_scale(ctx, ggml_mul_mat(ctx, it->second.second, ggml_mul_mat(ctx, it->second.first, x)), lora->scale));
    }
    return y;
}

ggml_tensor * norm(ggml_context * ctx, ggml_tensor * x, ggml_tensor * w, float eps) {
    return ggml_mul(ctx, ggml_rms_norm(ctx, x, eps), w);
}

/** qwen3's forward pass over one sample (src/models/qwen3.cpp), logits only at the target positions. */
Graph build(ggml_context * ctx, const Model & m, const Lora * lora, const Sample & s, bool with_labels) {
    const Hparams & hp = m.hp;
    // padded to a multiple of 32 at the end (causal attention: no real position sees the padding) so every
    // product over the sequence has an inner size the tiled GEMM takes (it needs multiples of 16)
    const int T = (int) ((s.tokens.size() + 31) / 32 * 32);
    const int n = (int) s.targets.size();
    Graph g{};
    g.tokens = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, T);
    memset(g.tokens->data, 0, 4 * T);
    memcpy(g.tokens->data, s.tokens.data(), 4 * s.tokens.size());
    ggml_tensor * pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, T);
    for (int i = 0; i < T; i++) ((int32_t *) pos->data)[i] = i;

    ggml_tensor * x = ggml_get_rows(ctx, m.tok_embd, g.tokens);
    const float kq_scale = 1.0f / sqrtf((float) hp.head_dim);
    for (const Layer & L : m.layers) {
        ggml_tensor * h = norm(ctx, x, L.attn_norm, hp.eps);
        ggml_tensor * q = ggml_reshape_3d(ctx, project(ctx, lora, L.wq, h), hp.head_dim, hp.n_head, T);
        ggml_tensor * k = ggml_reshape_3d(ctx, project(ctx, lora, L.wk, h), hp.head_dim, hp.n_head_kv, T);
        ggml_tensor * v = ggml_reshape_3d(ctx, project(ctx, lora, L.wv, h), hp.head_dim, hp.n_head_kv, T);
        q = ggml_rope_ext(ctx, norm(ctx, q, L.q_norm, hp.eps), pos, nullptr, hp.head_dim, GGML_ROPE_TYPE_NEOX, hp.n_ctx, hp.rope_base, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
        k = ggml_rope_ext(ctx, norm(ctx, k, L.k_norm, hp.eps), pos, nullptr, hp.head_dim, GGML_ROPE_TYPE_NEOX, hp.n_ctx, hp.rope_base, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
        q = ggml_cont(ctx, ggml_permute(ctx, q, 0, 2, 1, 3));                 // [hd, T, H]
        k = ggml_cont(ctx, ggml_permute(ctx, k, 0, 2, 1, 3));                 // [hd, T, Hkv]
        ggml_tensor * vt = ggml_cont(ctx, ggml_permute(ctx, v, 1, 2, 0, 3));  // [T, hd, Hkv]
        ggml_tensor * kq = ggml_mul_mat(ctx, k, q);                           // [T_k, T_q, H]
        kq = ggml_soft_max_ext(ctx, ggml_diag_mask_inf(ctx, kq, 0), nullptr, kq_scale, 0.0f);
        ggml_tensor * o = ggml_mul_mat(ctx, vt, kq);                          // [hd, T_q, H]
        o = ggml_reshape_2d(ctx, ggml_cont(ctx, ggml_permute(ctx, o, 0, 2, 1, 3)), hp.head_dim * hp.n_head, T);
        x = ggml_add(ctx, x, project(ctx, lora, L.wo, o));
        h = norm(ctx, x, L.ffn_norm, hp.eps);
        ggml_tensor * a = ggml_mul(ctx, ggml_silu(ctx, project(ctx, lora, L.gate, h)), project(ctx, lora, L.up, h));
        x = ggml_add(ctx, x, project(ctx, lora, L.down, a));
    }
    x = norm(ctx, x, m.output_norm, hp.eps);
    g.targets = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n);
    memcpy(g.targets->data, s.targets.data(), 4 * n);
    g.logits = ggml_mul_mat(ctx, m.output, ggml_get_rows(ctx, x, g.targets));  // [V, n]
    g.gf = ggml_new_graph_custom(ctx, 16384, true);
    if (with_labels) {
        g.labels = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, hp.n_vocab, n);
        float * lab = (float *) g.labels->data;
        memset(lab, 0, sizeof(float) * (size_t) hp.n_vocab * n);
        for (int j = 0; j < n; j++) lab[(size_t) j * hp.n_vocab + s.tokens[s.targets[j] + 1]] = 1.0f;
        g.loss = ggml_cross_entropy_loss(ctx, g.logits, g.labels);  // mean over the target rows
        ggml_set_loss(g.loss);
        ggml_build_forward_expand(g.gf, g.loss);
    } else {
        ggml_build_forward_expand(g.gf, g.logits);
    }
    return g;
}

/**
 * ggml's autodiff writes every matrix-product gradient as an outer product (GGML_OP_OUT_PROD), which its CPU
 * backend runs as a plain loop: two thirds of a training step. out_prod(a, b) equals
 * mul_mat(cont(transpose(a)), cont(transpose(b))), which runs on the same tiled GEMM as the forward pass, so the
 * backward graph is rewritten that way and rebuilt from the loss and the parameters' gradients.
 */
ggml_cgraph * with_gemm_gradients(ggml_context * ctx, ggml_cgraph * gb, const std::vector<ggml_tensor *> & grads, ggml_tensor * loss) {
    for (int i = 0; i < ggml_graph_n_nodes(gb); i++) {
        ggml_tensor * node = ggml_graph_node(gb, i);
        if (node->op != GGML_OP_OUT_PROD) continue;
        ggml_tensor * a = ggml_cont(ctx, ggml_transpose(ctx, node->src[0]));
        ggml_tensor * b = ggml_cont(ctx, ggml_transpose(ctx, node->src[1]));
        node->op = GGML_OP_MUL_MAT;
        node->src[0] = a;
        node->src[1] = b;
    }
    ggml_cgraph * out = ggml_new_graph_custom(ctx, 4 * ggml_graph_size(gb), false);
    ggml_build_forward_expand(out, loss);
    for (ggml_tensor * g : grads) ggml_build_forward_expand(out, g);
    return out;
}

struct Param {
    ggml_tensor * t;
    std::vector<float> grad, m, v;
};

struct Trainable {
    std::vector<Param> params;
};

Trainable trainable(const Model & m, const Lora * lora) {
    Trainable tr;
    auto add = [&](ggml_tensor * t) {
        ggml_set_param(t);
        size_t n = (size_t) ggml_nelements(t);
        tr.params.push_back({t, std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)});
    };
    if (lora) {
        for (auto & [w, ab] : lora->ab) {
            add(ab.first);
            add(ab.second);
        }
    } else {
        for (int64_t i = 0; i < gguf_get_n_tensors(m.gguf); i++) add(tensor_of(m.ctx, gguf_get_tensor_name(m.gguf, i)));
    }
    return tr;
}

/** Per-target log-softmax values for accuracy, mean loss, and optionally the full distribution of the last target. */
struct EvalStats {
    double loss = 0;
    long correct = 0, targets = 0;
};

void score(ggml_tensor * logits, const Sample & s, EvalStats & st, std::vector<float> * last) {
    const int V = (int) logits->ne[0];
    const int n = (int) logits->ne[1];
    for (int j = 0; j < n; j++) {
        const float * row = (const float *) logits->data + (size_t) j * V;
        float mx = row[0];
        int arg = 0;
        for (int i = 1; i < V; i++) if (row[i] > mx) { mx = row[i]; arg = i; }
        double z = 0;
        for (int i = 0; i < V; i++) z += exp((double) row[i] - mx);
        const int want = s.tokens[s.targets[j] + 1];
        st.loss += -((double) row[want] - mx - log(z));
        st.correct += arg == want;
        st.targets++;
        if (last && j == n - 1) {
            last->resize(V);
            for (int i = 0; i < V; i++) (*last)[i] = (float) ((double) row[i] - mx - log(z));
        }
    }
}

int evaluate(const Options & o, const Model & m, const Lora * lora) {
    std::vector<Sample> samples = read_samples(o.eval);
    Arena arena(o.mem_mb);
    EvalStats st;
    FILE * lp = o.logprobs_out.empty() ? nullptr : fopen(o.logprobs_out.c_str(), "wb");
    for (size_t i = 0; i < samples.size(); i++) {
        if (samples[i].targets.empty()) continue;
        ggml_init_params ip{arena.bytes, arena.data.get(), false};
        ggml_context * ctx = ggml_init(ip);
        Graph g = build(ctx, m, lora, samples[i], false);
        ggml_graph_compute_with_ctx(ctx, g.gf, o.threads);
        std::vector<float> last;
        score(g.logits, samples[i], st, lp ? &last : nullptr);
        if (lp) fwrite(last.data(), sizeof(float), last.size(), lp);
        ggml_free(ctx);
    }
    if (lp) fclose(lp);
    printf("{\"samples\": %zu, \"targets\": %ld, \"loss\": %.6f, \"accuracy\": %.6f}\n", samples.size(), st.targets, st.loss / std::max(1L, st.targets), (double) st.correct / std::max(1L, st.targets));
    return 0;
}

void write_gguf(gguf_context * in, ggml_context * ctx, const std::string & path) {
    // the same metadata and tensor order as the file read, with the trained values
    gguf_context * out = gguf_init_empty();
    gguf_set_kv(out, in);
    for (int64_t i = 0; i < gguf_get_n_tensors(in); i++) gguf_add_tensor(out, ggml_get_tensor(ctx, gguf_get_tensor_name(in, i)));
    const std::string tmp = path + ".tmp";
    if (!gguf_write_to_file(out, tmp.c_str(), false)) fail("cannot write " + tmp);
    gguf_free(out);
    if (rename(tmp.c_str(), path.c_str()) != 0) fail("cannot rename " + tmp + " to " + path);
}

int train(const Options & o, Model & m, Lora * lora) {
    std::vector<Sample> samples = read_samples(o.data);
    samples.erase(std::remove_if(samples.begin(), samples.end(), [](const Sample & s) { return s.targets.empty(); }), samples.end());
    if (samples.empty()) fail(o.data + " has no sample with a target token");
    Trainable tr = trainable(m, lora);
    Arena arena(o.mem_mb);
    std::mt19937 rng(o.seed);
    std::vector<size_t> order(samples.size());
    const int steps_per_epoch = (int) ((samples.size() + o.batch - 1) / o.batch);
    int total_steps = steps_per_epoch * o.epochs;
    if (o.max_steps > 0) total_steps = std::min(total_steps, o.max_steps);
    fprintf(stderr, "weact-train: %zu samples, %zu parameter tensors, %d steps of %d samples\n", samples.size(), tr.params.size(), total_steps, o.batch);
    int step = 0;
    long tokens_seen = 0;
    double loss_window = 0;
    long targets_window = 0;
    const auto started = std::chrono::steady_clock::now();
    for (int epoch = 0; epoch < o.epochs && step < total_steps; epoch++) {
        for (size_t i = 0; i < order.size(); i++) order[i] = i;
        std::shuffle(order.begin(), order.end(), rng);
        for (size_t first = 0; first < order.size() && step < total_steps; first += o.batch) {
            const size_t last = std::min(order.size(), first + o.batch);
            long batch_targets = 0;
            for (size_t i = first; i < last; i++) batch_targets += (long) samples[order[i]].targets.size();
            for (Param & p : tr.params) std::fill(p.grad.begin(), p.grad.end(), 0.0f);
            for (size_t i = first; i < last; i++) {
                const Sample & s = samples[order[i]];
                ggml_init_params ip{arena.bytes, arena.data.get(), false};
                ggml_context * ctx = ggml_init(ip);
                Graph g = build(ctx, m, lora, s, true);
                ggml_build_backward_expand(ctx, g.gf, nullptr);
                ggml_graph_reset(g.gf);  // the loss's gradient is 1; it lives in a tensor the rebuilt graph reads
                std::vector<ggml_tensor *> grads;
                for (Param & p : tr.params) {
                    ggml_tensor * gr = ggml_graph_get_grad(g.gf, p.t);
                    if (gr) grads.push_back(gr);
                }
                ggml_graph_compute_with_ctx(ctx, with_gemm_gradients(ctx, g.gf, grads, g.loss), o.threads);
                // the loss is the sample's mean over its targets: weight it by their share of the batch's
                const float w = (float) s.targets.size() / (float) batch_targets;
                for (Param & p : tr.params) {
                    ggml_tensor * gr = ggml_graph_get_grad(g.gf, p.t);
                    if (!gr) continue;  // no path from the loss to this tensor in this sample
                    const float * d = (const float *) gr->data;
                    for (size_t k = 0; k < p.grad.size(); k++) p.grad[k] += w * d[k];
                }
                const float l = *(const float *) g.loss->data;
                loss_window += (double) l * s.targets.size();
                targets_window += (long) s.targets.size();
                tokens_seen += (long) s.tokens.size();
                ggml_free(ctx);
            }
            double norm2 = 0;
            for (Param & p : tr.params) for (float gv : p.grad) norm2 += (double) gv * gv;
            const double gnorm = sqrt(norm2);
            const float clip = (o.clip > 0 && gnorm > o.clip) ? (float) (o.clip / gnorm) : 1.0f;
            // linear warm-up, then cosine decay to min_lr_ratio * lr
            float lr = o.lr;
            if (step < o.warmup) lr = o.lr * (float) (step + 1) / (float) o.warmup;
            else {
                const float progress = (float) (step - o.warmup) / (float) std::max(1, total_steps - o.warmup);
                lr = o.lr * (o.min_lr_ratio + (1 - o.min_lr_ratio) * 0.5f * (1 + cosf(3.14159265f * progress)));
            }
            const float b1 = o.beta1, b2 = o.beta2;
            const float c1 = 1 - powf(b1, (float) (step + 1)), c2 = 1 - powf(b2, (float) (step + 1));
            for (Param & p : tr.params) {
                float * x = (float *) p.t->data;
                // no decay on vectors (norm weights), as is usual
                const float wd = ggml_n_dims(p.t) > 1 ? o.weight_decay : 0.0f;
                for (size_t k = 0; k < p.grad.size(); k++) {
                    const float gk = p.grad[k] * clip;
                    p.m[k] = b1 * p.m[k] + (1 - b1) * gk;
                    p.v[k] = b2 * p.v[k] + (1 - b2) * gk * gk;
                    x[k] -= lr * ((p.m[k] / c1) / (sqrtf(p.v[k] / c2) + 1e-8f) + wd * x[k]);
                }
            }
            step++;
            if (step % o.log_every == 0 || step == total_steps) {
                const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
                fprintf(stderr, "step %d/%d epoch %d loss %.4f gnorm %.3f lr %.2e  %.0f tokens/s\n", step, total_steps, epoch + 1, loss_window / std::max(1L, targets_window), gnorm, lr, tokens_seen / secs);
                loss_window = 0;
                targets_window = 0;
            }
        }
    }
    if (lora) write_gguf(lora->gguf, lora->ctx, o.out);
    else write_gguf(m.gguf, m.ctx, o.out);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    printf("{\"steps\": %d, \"tokens\": %ld, \"seconds\": %.1f}\n", step, tokens_seen, secs);
    return 0;
}

}  // namespace

int main(int argc, char ** argv) {
    Options o = parse(argc, argv);
    Model m = load_model(o.model);
    Lora lora;
    const bool with_lora = !o.lora.empty();
    if (with_lora) lora = load_lora(o.lora, m);
    return o.eval.empty() ? train(o, m, with_lora ? &lora : nullptr) : evaluate(o, m, with_lora ? &lora : nullptr);
}
