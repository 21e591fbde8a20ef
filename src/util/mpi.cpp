#include "util/mpi.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "util/error.h"

#ifdef BLOCKLAB_HAVE_MPI
#include <mpi.h>
#endif

namespace blocklab::mpi {

namespace {
int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : 0;
}
}  // namespace

bool built_with_mpi() {
#ifdef BLOCKLAB_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

int local_ranks() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"})
    if (const int n = env_int(name); n > 0) return n;
  return 1;
}

#ifdef BLOCKLAB_HAVE_MPI

namespace {
constexpr size_t kPiece = size_t{1} << 30;

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw Error(std::string("MPI: ") + what + " failed (code " + std::to_string(rc) + ")");
}

// Tests the request until it completes: spins briefly, then sleeps between tests (see the header).
void wait_politely(MPI_Request& request) {
  int done = 0;
  for (int spin = 0;; ++spin) {
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    if (spin < 2000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(spin < 20000 ? 20 : 500));
    }
  }
}
}  // namespace

World::World(bool threaded) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) throw Error("MPI: initialised twice in one process");
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, threaded ? MPI_THREAD_SERIALIZED : MPI_THREAD_SINGLE, &provided),
        "MPI_Init_thread");
  threaded_ = threaded && provided >= MPI_THREAD_SERIALIZED;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

World::~World() { MPI_Finalize(); }

void world_rank_and_size(int& rank, int& size) {
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
}

void send(int dest, int tag, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  do {
    const size_t n = std::min(bytes, kPiece);
    MPI_Request request;
    check(MPI_Isend(p, static_cast<int>(n), MPI_BYTE, dest, tag, MPI_COMM_WORLD, &request), "MPI_Isend");
    wait_politely(request);
    p += n;
    bytes -= n;
  } while (bytes > 0);
}

void recv(int source, int tag, void* data, size_t bytes) {
  char* p = static_cast<char*>(data);
  do {
    const size_t n = std::min(bytes, kPiece);
    MPI_Request request;
    check(MPI_Irecv(p, static_cast<int>(n), MPI_BYTE, source, tag, MPI_COMM_WORLD, &request), "MPI_Irecv");
    wait_politely(request);
    p += n;
    bytes -= n;
  } while (bytes > 0);
}

int wait_any_source(int tag) {
  for (int spin = 0;; ++spin) {
    int found = 0;
    MPI_Status status;
    check(MPI_Iprobe(MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &found, &status), "MPI_Iprobe");
    if (found) return status.MPI_SOURCE;
    std::this_thread::sleep_for(std::chrono::microseconds(spin < 100 ? 50 : 2000));
  }
}

void broadcast(void* data, size_t bytes, int root) {
  char* p = static_cast<char*>(data);
  do {
    const size_t n = std::min(bytes, kPiece);
    MPI_Request request;
    check(MPI_Ibcast(p, static_cast<int>(n), MPI_BYTE, root, MPI_COMM_WORLD, &request), "MPI_Ibcast");
    wait_politely(request);
    p += n;
    bytes -= n;
  } while (bytes > 0);
}

int max_over_ranks(int value) {
  int out = 0;
  MPI_Request request;
  check(MPI_Iallreduce(&value, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &request), "MPI_Iallreduce");
  wait_politely(request);
  return out;
}

void barrier() {
  MPI_Request request;
  check(MPI_Ibarrier(MPI_COMM_WORLD, &request), "MPI_Ibarrier");
  wait_politely(request);
}

void abort_all(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();
}

#else  // built without MPI

namespace {
[[noreturn]] void unavailable() {
  throw Error("this blocklab was built without MPI (install libopenmpi-dev and openmpi-bin, then rebuild)");
}
}  // namespace

World::World(bool) { unavailable(); }
World::~World() = default;
void world_rank_and_size(int&, int&) { unavailable(); }
void send(int, int, const void*, size_t) { unavailable(); }
void recv(int, int, void*, size_t) { unavailable(); }
int wait_any_source(int) { unavailable(); }
void broadcast(void*, size_t, int) { unavailable(); }
int max_over_ranks(int) { unavailable(); }
void barrier() { unavailable(); }
void abort_all(int code) { std::exit(code); }

#endif

}  // namespace blocklab::mpi
