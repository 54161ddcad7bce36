# frozen_string_literal: true

require "json"

module CiJobTelemetry
  # Reads the decorator's 200 answer against the request it answers: the whole payload (`{ payload, telemetry }`,
  # SPEC §4, #read) or the changes to the payload the caller holds (`{ job_id, changes, telemetry }`, asked with
  # `Prefer: return=minimal`, #read_changes). A payload is used only when it is plainly the request's own,
  # decorated: the same job, every variable the request had, and `features.tracing` set; changes only when they are
  # for the request's job and touch nothing but the decorator's own variables and `features.tracing`. Anything else
  # is a wrong answer (a proxy's page, another job's, a payload cut short) and the pickup gets its own payload back.
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

    # [:decorated, payload, reason] or [:not_decorated, nil, reason]: the changes applied to a copy of `payload`
    # (which must be #appliable?); raises Invalid for an answer not to use.
    def self.read_changes(text, payload, job_id)
      answer = parse(text)
      telemetry = answer["telemetry"]
      raise Invalid, "no telemetry object" unless telemetry.is_a?(Hash)
      raise Invalid, "the answer of another job" unless answer["job_id"] == job_id

      reason = telemetry["reason"].is_a?(String) ? telemetry["reason"] : nil
      return [:not_decorated, nil, reason] unless telemetry["enabled"] == true

      [:decorated, apply(payload, answer["changes"]), reason]
    end

    # Whether changes can be applied here as the service applies them: a Hash whose variables (when present) are
    # Hashes in an Array and whose features (when present) are a Hash. Any other payload is sent whole, and the
    # service names what is wrong with it.
    def self.appliable?(payload)
      return false unless payload.is_a?(Hash)

      variables = field(payload, "variables")
      features = field(payload, "features")
      (variables.nil? || (variables.is_a?(Array) && variables.all?(Hash))) && (features.nil? || features.is_a?(Hash))
    end

    # A new payload: the variables keyed in `remove` taken out, `append` added at the end, `features.tracing` set.
    # Each member keeps the kind of key it had (a Rails hash may use symbols); what is added has string keys, as the
    # whole answer has. The caller's payload and its nested objects are not changed.
    def self.apply(payload, changes)
      variables = changes.is_a?(Hash) ? changes["variables"] : nil
      features = changes.is_a?(Hash) ? changes["features"] : nil
      remove = variables.is_a?(Hash) ? variables["remove"] : nil
      append = variables.is_a?(Hash) ? variables["append"] : nil
      raise Invalid, "no variables to change" unless remove.is_a?(Array) && append.is_a?(Array)
      unless (remove - DECORATOR_VARIABLES).empty? && append.all? { |v| v.is_a?(Hash) && DECORATOR_VARIABLES.include?(v["key"]) && v["value"].is_a?(String) }
        raise Invalid, "changes to variables that are not the decorator's"
      end
      raise Invalid, "no features.tracing" unless features.is_a?(Hash) && features.keys == ["tracing"] && features["tracing"].is_a?(Hash)

      kept = (field(payload, "variables") || []).reject { |variable| remove.include?(field(variable, "key")) }
      current = field(payload, "features") || {}
      payload.merge(key_as_sent(payload, "variables") => kept + append,
                    key_as_sent(payload, "features") => current.merge(key_as_sent(current, "tracing") => features["tracing"]))
    end

    def self.key_as_sent(hash, name)
      hash.key?(name.to_sym) && !hash.key?(name) ? name.to_sym : name
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
