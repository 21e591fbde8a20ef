#pragma once
// Data-parallel gradients that do not depend on how many processes compute them.
//
// A step's batch splits into M equal micro-shards (rows s*B/M .. (s+1)*B/M - 1 of the batch, s = 0..M-1).
// The step's gradient is the sum of the M shard gradients (divided by M by the caller), always added in
// one fixed binary tree over the shards:
//
//   level 0: node (0, s) = shard s's gradient
//   level l: node (l, i) = node (l-1, 2i) + node (l-1, 2i+1), or node (l-1, 2i) alone when 2i+1 is past
//            the end of level l-1; the root is the one node of the top level
//
// so every gradient value is the same sum of the same floats in the same order, whoever computes it.
// With K ranks (K dividing M), rank r computes the contiguous shards r*M/K .. (r+1)*M/K - 1 and adds
// every node whose shards are all its own; a node whose two halves lie on different ranks is added by
// the rank holding its left half after the other sends its right half (one message per such node, at
// most one per pair of ranks per level); the root ends on rank 0, which broadcasts it. Floating-point
// addition is commutative, so only the tree shape matters. With K = 1 nothing is sent.
//
// For M and K powers of two that is a binomial-tree reduce (log2 K messages of the gradient size into
// rank 0, then a broadcast); docs/scale-out.md works out what it costs.
#include <cstddef>
#include <span>
#include <vector>

namespace blocklab {

// How ranks exchange node buffers: MPI between processes, or threads in a test.
class ShardExchange {
 public:
  virtual ~ShardExchange() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void send(int dest, int tag, std::span<const float> data) = 0;
  virtual void recv(int source, int tag, std::span<float> data) = 0;
  virtual void broadcast(std::span<float> data, int root) = 0;
  // The largest of every rank's value (an integer: exact in any order).
  virtual int max_over_ranks(int value) = 0;
};

// The ranks of an MPI job (util/mpi.h must have been initialised with mpi::World).
class MpiShardExchange final : public ShardExchange {
 public:
  MpiShardExchange();
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void send(int dest, int tag, std::span<const float> data) override;
  void recv(int source, int tag, std::span<float> data) override;
  void broadcast(std::span<float> data, int root) override;
  int max_over_ranks(int value) override;

 private:
  int rank_ = 0, size_ = 1;
};

class ShardReducer {
 public:
  // shards M >= 1, ranks K dividing M, this rank in [0, K), n floats per node. Allocates its buffers here
  // (about log2(M/K) + 2 nodes), none later.
  ShardReducer(int shards, int ranks, int rank, size_t n);

  int first_shard() const { return first_; }
  int shard_count() const { return count_; }
  int owner(int shard) const { return shard / count_; }

  // Starts a step.
  void begin();
  // Adds this rank's next shard (first_shard() + k for the k-th call of the step) with its gradient.
  void add(std::span<const float> values);
  // Combines the rank's nodes with the other ranks' (exchange may be null when ranks == 1) and writes
  // the root into out (n floats) on every rank.
  void finish(std::span<float> out, ShardExchange* exchange);

  // Bytes this rank sent and received in the last finish() (broadcast counted as n floats received on
  // every rank but the root, sent once per other rank by the root).
  size_t bytes_sent() const { return sent_; }
  size_t bytes_received() const { return received_; }

 private:
  struct Node {
    int level, index, buffer;
  };
  int width(int level) const { return level_width_[static_cast<size_t>(level)]; }
  Node* find(int level, int index);
  bool covered(int level, int index) const;  // this rank holds the node or one above it
  int take_buffer();
  void combine_local();

  int shards_, ranks_, rank_, first_, count_;
  size_t n_;
  std::vector<int> level_width_;  // nodes per level; the last level has one
  std::vector<std::vector<float>> buffers_;
  std::vector<bool> in_use_;
  std::vector<Node> nodes_;  // this rank's nodes, a stack in shard order
  std::vector<float> incoming_;
  int added_ = 0;
  size_t sent_ = 0, received_ = 0;
};

}  // namespace blocklab
