# frozen_string_literal: true

require "json"

module CiJobTelemetry
  # Reads the decorator's 200 answer (`{ payload, telemetry }`, SPEC §4) against the request it answers. A payload
  # is used only when it is plainly the request's own, decorated: the same job, every variable the request had,
  # and `features.tracing` set. Anything else is a wrong answer (a proxy's page, another job's payload, a payload
  # cut short) and the pickup gets its own payload back.
  module Answer
    # The variables the decorator owns and may replace (src/job-payload/job-payload-decoration.ts).
    DECORATOR_VARIABLES = %w[TRACEPARENT TRACESTATE CI_JOB_TELEMETRY_OTLP_ENDPOINT].freeze

    class Invalid < StandardError; end

    # [:decorated, payload, reason] or [:not_decorated, nil, reason]; raises Invalid for an answer not to use.
    def self.read(text, request_payload)
      answer = parse(text)
      telemetry = answer["telemetry"]
      payload = answer["payload"]
      raise Invalid, "no telemetry object" unless telemetry.is_a?(Hash)

      reason = telemetry["reason"].is_a?(String) ? telemetry["reason"] : nil
      return [:not_decorated, nil, reason] unless telemetry["enabled"] == true

      raise Invalid, "no payload object" unless payload.is_a?(Hash)
      raise Invalid, "the payload of another job" unless payload["id"] == field(request_payload, "id")
      raise Invalid, "no features.tracing" unless payload["features"].is_a?(Hash) && payload["features"]["tracing"].is_a?(Hash)

      check_variables(field(request_payload, "variables"), payload["variables"])
      [:decorated, payload, reason]
    end

    def self.parse(text)
      answer = JSON.parse(text)
      raise Invalid, "not a JSON object" unless answer.is_a?(Hash)

      answer
    rescue JSON::ParserError
      raise Invalid, "not JSON"
    end

    # Every variable the request had comes back with its value, except the decorator's own (which it replaces).
    def self.check_variables(sent, answered)
      return if sent.nil? || sent.empty?
      raise Invalid, "variables missing" unless answered.is_a?(Array)

      kept = {}
      answered.each { |variable| kept[variable["key"]] = variable["value"] if variable.is_a?(Hash) }
      sent.each do |variable|
        key = field(variable, "key")
        next if DECORATOR_VARIABLES.include?(key)
        raise Invalid, "variables missing" unless kept.key?(key) && kept[key] == field(variable, "value")
      end
    end

    # The request may be built with string or symbol keys (as a Rails hash); the answer always has strings.
    def self.field(hash, name)
      return nil unless hash.is_a?(Hash)

      hash.key?(name) ? hash[name] : hash[name.to_sym]
    end
  end
end
