# frozen_string_literal: true

module CiJobTelemetry
  VERSION = "0.1.0"
end
