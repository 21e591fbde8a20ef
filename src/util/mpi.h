#pragma once
// A thin layer over MPI for the few things blocklab does with it: a task farm for sweeps and the
// exchange of gradient shards in data-parallel training. Built with MPI when CMake finds it
// (BLOCKLAB_HAVE_MPI); without it every function that would talk to other ranks throws Error, and
// built_with_mpi() says so.
//
// Waiting is polite: a rank that waits for a message tests for it, and after a short spin sleeps in
// between, so that ranks that share cores (oversubscribed, or a rank waiting while others compute)
// leave them to the ranks that work. Open MPI's own blocking calls spin at full speed instead.
#include <cstddef>
#include <string>

namespace blocklab::mpi {

bool built_with_mpi();
// True when the environment says an MPI launcher (mpirun, mpiexec, srun) started this process.
bool launched_by_mpi();
// The number of ranks on this machine as the launcher says (OMPI_COMM_WORLD_LOCAL_SIZE and the like); 1 if unknown.
int local_ranks();

// MPI_Init_thread on construction, MPI_Finalize on destruction; one per process. threaded: the caller
// will use MPI from a thread other than the main one, never at the same time as another thread
// (MPI_THREAD_SERIALIZED); threaded() says whether the library granted that.
class World {
 public:
  explicit World(bool threaded = false);
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool threaded() const { return threaded_; }

 private:
  int rank_ = 0, size_ = 1;
  bool threaded_ = false;
};

// This process's rank and the number of ranks (MPI_COMM_WORLD); World must exist.
void world_rank_and_size(int& rank, int& size);

// Point to point, any size (sent in pieces below 1 GiB).
void send(int dest, int tag, const void* data, size_t bytes);
void recv(int source, int tag, void* data, size_t bytes);
// Waits for a message with this tag from any rank and returns its source (the message is then received
// with recv).
int wait_any_source(int tag);
// Collectives over all ranks.
void broadcast(void* data, size_t bytes, int root);
int max_over_ranks(int value);  // an integer, so the order of the reduction does not matter
void barrier();
// Ends every rank of the job at once (MPI_Abort).
[[noreturn]] void abort_all(int code);

}  // namespace blocklab::mpi
