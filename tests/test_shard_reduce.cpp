// The fixed-tree gradient sum of data-parallel training, with simulated ranks (threads) instead of MPI:
// the same bits for every number of ranks that divides the number of shards, equal to an independent
// recursive evaluation of the tree.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "train/shard_reduce.h"
#include "util/error.h"
#include "util/rng.h"

using namespace blocklab;

namespace {

// Mailboxes between threads that play the ranks.
struct Post {
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::tuple<int, int, int>, std::deque<std::vector<float>>> boxes;  // (from, to, tag)
  size_t messages = 0;
};

class ThreadExchange final : public ShardExchange {
 public:
  ThreadExchange(Post& post, int rank, int size) : post_(post), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void send(int dest, int tag, std::span<const float> data) override {
    std::lock_guard<std::mutex> lock(post_.mutex);
    post_.boxes[{rank_, dest, tag}].emplace_back(data.begin(), data.end());
    ++post_.messages;
    post_.changed.notify_all();
  }
  void recv(int source, int tag, std::span<float> data) override {
    std::unique_lock<std::mutex> lock(post_.mutex);
    auto& box = post_.boxes[{source, rank_, tag}];
    post_.changed.wait(lock, [&] { return !box.empty(); });
    ASSERT_EQ(box.front().size(), data.size());
    std::copy(box.front().begin(), box.front().end(), data.begin());
    box.pop_front();
  }
  void broadcast(std::span<float> data, int root) override {
    if (rank_ == root)
      for (int r = 0; r < size_; ++r)
        if (r != root) send(r, -1, data);
    if (rank_ != root) recv(root, -1, data);
  }
  int max_over_ranks(int value) override { return value; }  // not used by the reducer

 private:
  Post& post_;
  int rank_, size_;
};

// The tree of shard_reduce.h evaluated from its definition: node (l, i) covers shards [i*2^l, (i+1)*2^l).
std::vector<float> tree_sum(const std::vector<std::vector<float>>& leaves, int lo, int hi) {
  if (hi - lo == 1) return leaves[static_cast<size_t>(lo)];
  int half = 1;
  while (half * 2 < hi - lo) half *= 2;  // the left subtree is a full power of two
  std::vector<float> a = tree_sum(leaves, lo, lo + half);
  if (lo + half < hi) {
    const std::vector<float> b = tree_sum(leaves, lo + half, hi);
    for (size_t k = 0; k < a.size(); ++k) a[k] += b[k];
  }
  return a;
}

std::vector<std::vector<float>> random_leaves(int shards, size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<std::vector<float>> leaves(static_cast<size_t>(shards), std::vector<float>(n));
  for (auto& leaf : leaves)
    for (float& v : leaf) v = static_cast<float>(rng.normal() * std::exp(rng.uniform(-8.0, 8.0)));  // wide range
  return leaves;
}

std::vector<float> reduce_with_ranks(const std::vector<std::vector<float>>& leaves, int ranks, size_t* messages) {
  const int shards = static_cast<int>(leaves.size());
  const size_t n = leaves[0].size();
  Post post;
  std::vector<std::vector<float>> out(static_cast<size_t>(ranks), std::vector<float>(n, -1.0f));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      ThreadExchange exchange(post, r, ranks);
      ShardReducer reducer(shards, ranks, r, n);
      for (int step = 0; step < 2; ++step) {  // twice: a reducer is reused from step to step
        reducer.begin();
        for (int k = 0; k < reducer.shard_count(); ++k) reducer.add(leaves[static_cast<size_t>(reducer.first_shard() + k)]);
        reducer.finish(out[static_cast<size_t>(r)], ranks > 1 ? &exchange : nullptr);
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 1; r < ranks; ++r)
    EXPECT_EQ(std::memcmp(out[0].data(), out[static_cast<size_t>(r)].data(), n * sizeof(float)), 0) << "rank " << r;
  if (messages) *messages = post.messages;
  return out[0];
}

}  // namespace

TEST(ShardReduce, SameBitsForEveryNumberOfRanksAndEqualToTheTree) {
  const size_t n = 257;
  for (int shards : {1, 2, 3, 4, 5, 6, 8, 12, 16}) {
    const auto leaves = random_leaves(shards, n, 1000 + shards);
    const std::vector<float> expected = tree_sum(leaves, 0, shards);
    for (int ranks = 1; ranks <= shards; ++ranks) {
      if (shards % ranks != 0) continue;
      const std::vector<float> got = reduce_with_ranks(leaves, ranks, nullptr);
      EXPECT_EQ(std::memcmp(got.data(), expected.data(), n * sizeof(float)), 0)
          << "shards " << shards << ", ranks " << ranks;
    }
  }
}

TEST(ShardReduce, TheOrderMattersSoTheTestCanFail) {
  // A plain left-to-right sum of the same leaves differs from the tree somewhere: the test above compares
  // bits that an accidental change of order would change.
  const auto leaves = random_leaves(8, 257, 7);
  const std::vector<float> tree = tree_sum(leaves, 0, 8);
  std::vector<float> serial = leaves[0];
  for (size_t s = 1; s < leaves.size(); ++s)
    for (size_t k = 0; k < serial.size(); ++k) serial[k] += leaves[s][k];
  EXPECT_NE(std::memcmp(tree.data(), serial.data(), tree.size() * sizeof(float)), 0);
}

TEST(ShardReduce, PowersOfTwoSendOneMessagePerRankAndABroadcast) {
  // 8 shards on 4 ranks: ranks 1 and 3 send to 0 and 2, rank 2 to 0 (3 messages), then 3 broadcast copies;
  // the test runs two steps.
  size_t messages = 0;
  reduce_with_ranks(random_leaves(8, 16, 3), 4, &messages);
  EXPECT_EQ(messages, 2u * (3 + 3));
}

TEST(ShardReduce, RefusesRanksThatDoNotDivideTheShards) {
  EXPECT_THROW(ShardReducer(6, 4, 0, 8), Error);
  EXPECT_THROW(ShardReducer(0, 1, 0, 8), Error);
  EXPECT_NO_THROW(ShardReducer(6, 3, 2, 8));
}
