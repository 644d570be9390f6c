// File: deployment.h
// -----------------------------------------------------------------------------
// Deployment: this rank's share of a model served by T×P ranks — the parallel state (vLLM's
// groups), the stage's layer range, this rank's part of the model and its Worker. Create() is
// collective: every rank calls it with the same options. It checks that the model divides over
// the requested sizes before any weight is read, loads this rank's part, and then all ranks
// agree on the outcome, so a rank that fails to load becomes one error naming it (rank, stage,
// TP rank, host) on every rank instead of a hang.
//
// With one process (the default backend) nothing touches MPI.
#pragma once

#include <filesystem>
#include <memory>

#include "base/thread_pool.h"
#include "distributed/parallel_state.h"
#include "models/checkpoint.h"
#include "models/llama_model.h"
#include "worker/worker.h"

namespace uc::engine {

struct DeploymentOptions {
  std::filesystem::path model_path;
  int tensor_parallel_size = 1;
  int pipeline_parallel_size = 1;
  int num_threads = 0;                  // per rank; 0: the cores available / ranks on this host
  double step_timeout_seconds = 120.0;  // the driver's watchdog per step
  models::LoadOptions load = {};        // how the model is built (matmul precision)
};

// InvalidArgument naming the dimension when `config` does not split over tp × pp.
Status ValidateParallelism(const models::ModelConfig& config, int tp, int pp,
                           const std::string& source);

class Deployment {
 public:
  // `backend` null: this process alone (world size 1). Otherwise the backend of the world
  // (MPI), whose size must be tp × pp.
  static StatusOr<std::unique_ptr<Deployment>> Create(const DeploymentOptions& options,
                                                      distributed::Backend* backend = nullptr);
  ~Deployment();

  bool is_driver() const { return worker_->is_driver(); }
  worker::Worker& worker() { return *worker_; }
  models::CausalLM& model() { return *model_; }
  const models::Checkpoint& checkpoint() const { return checkpoint_; }
  ThreadPool& pool() { return *pool_; }
  distributed::ParallelState& parallel_state() { return *state_; }

 private:
  Deployment() = default;
  Status Load(const DeploymentOptions& options);

  std::unique_ptr<distributed::Backend> local_backend_;
  std::unique_ptr<distributed::ParallelState> state_;
  models::Checkpoint checkpoint_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<models::CausalLM> model_;
  std::unique_ptr<worker::Worker> worker_;
};

}  // namespace uc::engine
