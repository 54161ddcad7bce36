# frozen_string_literal: true

require "minitest/autorun"
require "json"
require "tmpdir"
require "ci_job_telemetry"

# What the tests share: requests shaped as GitLab's job-request API sends them (as test/fixtures/job-payload.ts
# does for the Node tests), and the servers test/e2e/ruby-client.e2e-spec.ts started for the service tests.
module ClientTestSupport
  REPOSITORY = File.expand_path("../../..", __dir__)
  # The deadline of the failure tests, and what a call may take at most with it. The slack is generous because
  # the machine running the suite may be loaded: the point is that a call ends near its deadline, not at a
  # stalling server's pleasure (each of those would hold it for ever).
  DEADLINE = 0.2
  DEADLINE_BOUND = 1.0

  # The address of a server the jest spec started; the service tests do not run without it.
  def world(name)
    ENV.fetch(name) do
      raise "#{name} is not set: the service tests run from jest, which starts the service and the misbehaving " \
            "servers: npx jest test/e2e/ruby-client.e2e-spec.ts"
    end
  end

  def job_request(job_id: 1001, project_id: 7, root_pipeline_id: 500)
    {
      "runner" => { "id" => 17, "runner_type" => "project_type", "token" => "glrt-t3st-runner-token-0123456789", "features" => { "tracing" => true } },
      "job" => {
        "id" => job_id, "project_id" => project_id, "namespace_id" => 3, "root_namespace_id" => 2,
        "pipeline_id" => root_pipeline_id, "root_pipeline_id" => root_pipeline_id, "timeout" => 3600,
        "queued_at" => "2026-11-21T10:00:00Z", "token" => "glcbt-opaque-job-token-abcdefghij"
      },
      "payload" => {
        "id" => job_id,
        "token" => "payload-job-token",
        "allow_git_fetch" => true,
        "job_info" => { "name" => "rspec 1/4", "stage" => "test", "project_id" => project_id },
        "variables" => [
          { "key" => "CI_JOB_ID", "value" => job_id.to_s, "public" => true, "masked" => false },
          { "key" => "SECRET", "value" => "s3cr3t", "public" => false, "masked" => true }
        ],
        "steps" => [{ "name" => "script", "script" => ["bundle exec rspec"], "timeout" => 3600, "when" => "on_success" }],
        "features" => { "trace_sections" => true, "failure_reasons" => ["script_failure"] }
      }
    }
  end

  # A client that records every Call it reports.
  def client_for(base_url, secret_file: world("CJT_SECRET_FILE"), **options)
    calls = Thread::Queue.new
    client = CiJobTelemetry::Client.new(base_url: base_url, secret_file: secret_file, on_call: ->(call) { calls << call }, **options)
    @clients = (@clients || []) << client
    [client, calls]
  end

  def teardown
    (@clients || []).each(&:close)
    super
  end

  def monotonic
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  # Decorates and returns [result, seconds taken].
  def timed_decorate(client, request)
    started = monotonic
    result = client.decorate(request)
    [result, monotonic - started]
  end

  # The pickup got its own payload object back, unchanged, and did not wait much past the deadline.
  def assert_untouched_in_time(request, result, seconds)
    sent = Marshal.load(Marshal.dump(request["payload"]))
    assert_same request["payload"], result, "the request's own payload comes back"
    assert_equal sent, result, "and nothing in it changed"
    assert_operator seconds, :<, DEADLINE_BOUND, "a #{DEADLINE} s deadline held the call #{seconds.round(3)} s"
  end

  def secret_file_with(bytes)
    path = File.join(Dir.mktmpdir("cjt-ruby-secret-"), "internal_api_secret")
    File.write(path, [bytes].pack("m0"))
    path
  end
end
