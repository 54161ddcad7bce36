# frozen_string_literal: true

# The Rails side of CI Job Telemetry's decorator (SPEC §4): CiJobTelemetry::Client decorates a job payload at
# pickup, and hands back the payload untouched, within its deadline, whenever anything goes wrong.
require "ci_job_telemetry/version"
require "ci_job_telemetry/internal_api_token"
require "ci_job_telemetry/breaker"
require "ci_job_telemetry/connection_pool"
require "ci_job_telemetry/answer"
require "ci_job_telemetry/client"
