#include "train/shard_reduce.h"

#include <algorithm>

#include "util/error.h"
#include "util/mpi.h"

namespace blocklab {

MpiShardExchange::MpiShardExchange() {
  // rank and size come from the MPI world created by the caller
  rank_ = 0;
  size_ = 1;
  mpi::world_rank_and_size(rank_, size_);
}

void MpiShardExchange::send(int dest, int tag, std::span<const float> data) {
  mpi::send(dest, tag, data.data(), data.size_bytes());
}
void MpiShardExchange::recv(int source, int tag, std::span<float> data) {
  mpi::recv(source, tag, data.data(), data.size_bytes());
}
void MpiShardExchange::broadcast(std::span<float> data, int root) { mpi::broadcast(data.data(), data.size_bytes(), root); }
int MpiShardExchange::max_over_ranks(int value) { return mpi::max_over_ranks(value); }

ShardReducer::ShardReducer(int shards, int ranks, int rank, size_t n)
    : shards_(shards), ranks_(ranks), rank_(rank), n_(n) {
  if (shards < 1) throw Error("micro_shards must be >= 1, got " + std::to_string(shards));
  if (ranks < 1 || shards % ranks != 0)
    throw Error("micro_shards " + std::to_string(shards) + " is not a multiple of the number of ranks " +
                std::to_string(ranks) + " (choose a number of ranks that divides it)");
  if (rank < 0 || rank >= ranks) throw Error("rank out of range");
  count_ = shards / ranks;
  first_ = rank * count_;
  for (int w = shards;; w = (w + 1) / 2) {
    level_width_.push_back(w);
    if (w == 1) break;
  }
  // The local stack holds at most one node per level plus one being added; the exchange adds one.
  const size_t buffers = level_width_.size() + 2;
  buffers_.assign(buffers, std::vector<float>(n));
  in_use_.assign(buffers, false);
  nodes_.reserve(buffers);
  incoming_.assign(n, 0.0f);
}

int ShardReducer::take_buffer() {
  for (size_t b = 0; b < in_use_.size(); ++b)
    if (!in_use_[b]) {
      in_use_[b] = true;
      return static_cast<int>(b);
    }
  throw Error("ShardReducer: out of node buffers");  // cannot happen: sized for the deepest stack
}

ShardReducer::Node* ShardReducer::find(int level, int index) {
  for (Node& node : nodes_)
    if (node.level == level && node.index == index) return &node;
  return nullptr;
}

bool ShardReducer::covered(int level, int index) const {
  for (const Node& node : nodes_)
    if (node.level >= level && node.index == (index >> (node.level - level))) return true;
  return false;
}

void ShardReducer::begin() {
  nodes_.clear();
  std::fill(in_use_.begin(), in_use_.end(), false);
  added_ = 0;
  sent_ = received_ = 0;
}

// Adds the top two nodes of the stack while they are siblings, and lifts a node that has no sibling
// (the last of an odd-width level) to its parent: every node whose shards are all this rank's.
void ShardReducer::combine_local() {
  const int top_level = static_cast<int>(level_width_.size()) - 1;
  for (bool changed = true; changed;) {
    changed = false;
    Node& top = nodes_.back();
    if (top.level < top_level && top.index % 2 == 0 && top.index == width(top.level) - 1) {
      top.level += 1;  // no right sibling: the parent is this node
      top.index /= 2;
      changed = true;
      continue;
    }
    if (nodes_.size() < 2) break;
    Node& left = nodes_[nodes_.size() - 2];
    if (left.level == top.level && left.index % 2 == 0 && top.index == left.index + 1) {
      float* a = buffers_[static_cast<size_t>(left.buffer)].data();
      const float* b = buffers_[static_cast<size_t>(top.buffer)].data();
      for (size_t i = 0; i < n_; ++i) a[i] += b[i];
      in_use_[static_cast<size_t>(top.buffer)] = false;
      nodes_.pop_back();
      left.level += 1;
      left.index /= 2;
      changed = true;
    }
  }
}

void ShardReducer::add(std::span<const float> values) {
  if (values.size() != n_) throw Error("ShardReducer::add: wrong size");
  if (added_ >= count_) throw Error("ShardReducer::add: more shards than this rank owns");
  const int buffer = take_buffer();
  std::copy(values.begin(), values.end(), buffers_[static_cast<size_t>(buffer)].begin());
  nodes_.push_back({0, first_ + added_, buffer});
  ++added_;
  combine_local();
}

void ShardReducer::finish(std::span<float> out, ShardExchange* exchange) {
  if (added_ != count_) throw Error("ShardReducer::finish: not every shard of this rank was added");
  if (out.size() != n_) throw Error("ShardReducer::finish: wrong size");
  if (ranks_ > 1 && (exchange == nullptr || exchange->size() != ranks_ || exchange->rank() != rank_))
    throw Error("ShardReducer::finish: the exchange does not match the ranks");
  // The holder of a node is the rank of its first shard.
  auto holder = [&](int level, int index) { return owner(std::min(index << level, shards_ - 1)); };
  for (int level = 1; level < static_cast<int>(level_width_.size()); ++level) {
    for (int i = 0; i < width(level); ++i) {
      const int left = 2 * i, right = 2 * i + 1;
      if (covered(level, i)) continue;  // all its shards are this rank's: added already (maybe into a higher node)
      if (right >= width(level - 1)) {  // no right half: the left half is the node
        if (Node* node = find(level - 1, left)) node->level = level, node->index = i;
        continue;
      }
      const int left_rank = holder(level - 1, left), right_rank = holder(level - 1, right);
      if (right_rank == rank_ && left_rank != rank_) {
        Node* node = find(level - 1, right);
        if (node == nullptr) throw Error("ShardReducer: a node to send is missing");
        exchange->send(left_rank, 1000 + level, buffers_[static_cast<size_t>(node->buffer)]);
        sent_ += n_ * sizeof(float);
        in_use_[static_cast<size_t>(node->buffer)] = false;
        nodes_.erase(nodes_.begin() + (node - nodes_.data()));
      } else if (left_rank == rank_) {
        Node* a = find(level - 1, left);
        if (a == nullptr) throw Error("ShardReducer: a node to add to is missing");
        const float* b;
        Node* local_right = nullptr;
        if (right_rank == rank_) {
          local_right = find(level - 1, right);
          if (local_right == nullptr) throw Error("ShardReducer: a local node is missing");
          b = buffers_[static_cast<size_t>(local_right->buffer)].data();
        } else {
          exchange->recv(right_rank, 1000 + level, incoming_);
          received_ += n_ * sizeof(float);
          b = incoming_.data();
        }
        float* sum = buffers_[static_cast<size_t>(a->buffer)].data();
        for (size_t k = 0; k < n_; ++k) sum[k] += b[k];
        a->level = level;
        a->index = i;
        if (local_right != nullptr) {
          in_use_[static_cast<size_t>(local_right->buffer)] = false;
          nodes_.erase(nodes_.begin() + (local_right - nodes_.data()));
        }
      }
    }
  }
  if (rank_ == 0) {
    const Node* root = find(static_cast<int>(level_width_.size()) - 1, 0);
    if (root == nullptr) throw Error("ShardReducer: the root is missing");
    const std::vector<float>& r = buffers_[static_cast<size_t>(root->buffer)];
    std::copy(r.begin(), r.end(), out.begin());
  }
  if (ranks_ > 1) {
    exchange->broadcast(out, 0);
    if (rank_ == 0)
      sent_ += (ranks_ - 1) * n_ * sizeof(float);
    else
      received_ += n_ * sizeof(float);
  }
}

}  // namespace blocklab
