# frozen_string_literal: true

require "json"
require "time"
require "uri"

module CiJobTelemetry
  # What one #decorate did, handed to the client's `on_call` callback (a metric, a log line).
  #
  # - outcome: :decorated (the decorated payload was returned), :not_decorated (the service said telemetry is off
  #   for the job: the request's payload was returned), :skipped (the breaker is open: no call was made), or a
  #   failure, each returning the request's payload: :timeout, :unreachable, :unauthorized (401/403: the secret,
  #   the issuer or the clock disagrees with the service), :http_error, :invalid_answer, :error.
  # - duration: seconds the call took, on the monotonic clock.
  # - reason: the service's `telemetry.reason` when it answered (`enabled`, `flag_disabled`, …).
  # - status: the HTTP status when there was one.
  # - error: what went wrong, in words that never hold the token, the secret or the payload.
  # - breaker: the breaker's state after the call.
  # - operation: :decorate, or the read it was (:pipeline_trace, :job_trace, :critical_path, :jobs_summary, and across
  #   pipelines :compare_pipeline, :regressions, :waste, :runner_queue, :runner_what_if), whose outcomes are :read,
  #   :not_found (no such pipeline or job of that project, or not in the window), :bad_request (an id, a time or a
  #   field the service refused), :unanswerable (422: what is recorded cannot answer it, e.g. nothing to compare a
  #   pipeline with), :skipped, or a failure: :unavailable (503: the service's store could not answer in time),
  #   :timeout, :unreachable, :unauthorized, :http_error, :invalid_answer, :error.
  Call = Struct.new(:outcome, :duration, :reason, :status, :error, :breaker, :operation, keyword_init: true)

  # What a read returned: `data` (the service's JSON answer, string keys) when `outcome` is :read, else nil, with
  # the reason in `outcome`, `status` and `error`; `retry_after` (seconds) when the service said when to ask again.
  Read = Struct.new(:data, :outcome, :status, :error, :retry_after, keyword_init: true) do
    def ok?
      outcome == :read
    end
  end

  # The decorator's client for GitLab's job-request API (SPEC §4). #decorate returns the decorated payload, or
  # the request's own payload whenever anything goes wrong; it never raises, and every wait it makes ends by its
  # deadline. Safe to share between threads: build one per process and keep it.
  #
  # It also reads traces (SPEC §12): #pipeline_trace, #job_trace, #critical_path and #jobs_summary, and across
  # pipelines (SPEC §13) #compare_pipeline, #regressions, #waste, #runner_queue and #runner_what_if return a Read,
  # never raise, and end by their own deadline, behind a breaker of their own: a store that cannot answer reads must
  # not stop pickups from being decorated.
  class Client
    PATH = "/internal/ci/telemetry/job_payload"
    READS_PATH = "/internal/ci/telemetry/projects"
    FAILURES = %i[timeout unreachable unauthorized http_error invalid_answer error].freeze
    READ_FAILURES = %i[unavailable timeout unreachable unauthorized http_error invalid_answer error].freeze
    # An answer is the request's payload plus a trace context and an endpoint: anything much larger is not one,
    # and is not read (nor parsed) whole.
    ANSWER_SLACK_BYTES = 64 * 1024
    HEADERS = {
      "Content-Type" => "application/json",
      "Accept" => "application/json",
      # Net::HTTP asks for gzip by default; the answer is on a local network and inflating it costs CPU.
      "Accept-Encoding" => "identity",
      "User-Agent" => "ci-job-telemetry-ruby/#{VERSION}"
    }.freeze
    # Asks for the changes to the payload rather than the payload (RFC 7240): the payload is not sent at all.
    CHANGES_HEADERS = HEADERS.merge("Prefer" => "return=minimal").freeze
    ANSWERS = %i[changes payload].freeze

    class AnswerTooLarge < StandardError; end

    # - base_url: the service's internal API, e.g. "http://ci-job-telemetry:8080" (a path prefix is kept).
    # - secret_file: the file of INTERNAL_API_SECRET_FILE (base64); read on first use, so a missing file makes
    #   calls fail open instead of stopping the application from booting.
    # - deadline: seconds a call may take in all (connect, write, read, parse).
    # - on_call: called with a Call after every #decorate, in the caller's thread; what it raises is ignored.
    # - breaker: a Breaker, or the options of one (threshold:, window:, cool_off:).
    # - pool_size: idle keep-alive connections kept (the threads that call at once, e.g. Puma's max threads).
    # - keep_alive: seconds an idle connection is reused; below the service's idle timeout (Fastify's 72 s).
    # - read_deadline: seconds a read may take in all; a person is waiting for a page, not a runner for a job.
    # - read_breaker: the reads' Breaker, or its options.
    # - max_read_bytes: an answer to a read larger than this is not read (a trace of thousands of spans is megabytes).
    # - answer: :changes (sends the runner and the job only, and applies the service's changes to the payload here:
    #   its kilobytes cross the network neither way; needs a service that knows `Prefer: return=minimal`) or
    #   :payload (sends the payload and takes the decorated one back, as SPEC §4 first described).
    def initialize(base_url:, secret_file:, deadline: 0.05, issuer: "gitlab", on_call: nil, breaker: {}, pool_size: 8, keep_alive: 30,
                   read_deadline: 2.0, read_breaker: {}, max_read_bytes: 64 * 1024 * 1024, answer: :changes)
      uri = URI(base_url)
      raise ArgumentError, "base_url must be an http or https URL" unless %w[http https].include?(uri.scheme) && uri.host
      raise ArgumentError, "answer must be one of #{ANSWERS.join(', ')}" unless ANSWERS.include?(answer)

      @answer = answer
      @path = "#{uri.path.chomp('/')}#{PATH}"
      @reads_path = "#{uri.path.chomp('/')}#{READS_PATH}"
      @read_deadline = Float(read_deadline)
      @read_breaker = read_breaker.is_a?(Breaker) ? read_breaker : Breaker.new(**read_breaker)
      @max_read_bytes = Integer(max_read_bytes)
      @secret_file = secret_file
      @issuer = issuer
      @deadline = Float(deadline)
      @on_call = on_call
      @breaker = breaker.is_a?(Breaker) ? breaker : Breaker.new(**breaker)
      @token = nil
      @pool = ConnectionPool.new(size: pool_size) do
        # nil proxy: the service is on the internal network, whatever http_proxy the application has.
        connection = Connection.new(uri.host, uri.port, nil)
        connection.use_ssl = uri.scheme == "https"
        connection.keep_alive_timeout = keep_alive
        connection
      end
    end

    attr_reader :breaker, :read_breaker

    # :closed, :open or :half_open.
    def breaker_state
      @breaker.state
    end

    # The decorated `payload` of `request` (the decorator's request body: runner, job, payload, with string or
    # symbol keys), or the request's own payload object, untouched.
    def decorate(request)
      started = monotonic
      sent = Answer.field(request, "payload")
      return report(Call.new(outcome: :skipped, operation: :decorate), started, sent) unless @breaker.allow?

      call = Call.new(outcome: :error, operation: :decorate)
      payload = sent
      begin
        payload = exchange(request, sent, started + @deadline, call) || sent
      rescue StandardError => e
        failed(call, e)
      ensure
        # Always, even for an exception not rescued here: a probe that never reported would hold the breaker
        # half open, skipping every call, for good.
        FAILURES.include?(call.outcome) ? @breaker.failure : @breaker.success
      end
      payload = sent if FAILURES.include?(call.outcome)
      report(call, started, payload)
    end

    # A pipeline's whole trace (its child pipelines included) with how complete it is: the service's answer,
    # `{ "trace" => OTLP/JSON TracesData, "completeness" => {...} }`. `from`/`to` (Time or ISO 8601) bound the
    # lookup: pass the pipeline's created and finished times.
    def pipeline_trace(project_id:, pipeline_id:, from: nil, to: nil)
      read(:pipeline_trace, [project_id, "pipelines", pipeline_id, "trace"], from: from, to: to)
    end

    # A job's subtree: its span, queue wait, the runner's spans and what its programs exported, with completeness.
    def job_trace(project_id:, job_id:, from: nil, to: nil)
      read(:job_trace, [project_id, "jobs", job_id, "trace"], from: from, to: to)
    end

    # Why the pipeline took as long as it did: the path's jobs, its time by part, every other job's slack.
    def critical_path(project_id:, pipeline_id:, from: nil, to: nil)
      read(:critical_path, [project_id, "pipelines", pipeline_id, "critical_path"], from: from, to: to)
    end

    # The project's jobs per name over a window, optionally on one ref: runs, failures, retries, durations, queue
    # waits, and how often and how long on the critical path.
    def jobs_summary(project_id:, from: nil, to: nil, ref: nil)
      read(:jobs_summary, [project_id, "jobs"], from: from, to: to, ref: ref)
    end

    # Why the pipeline's critical path took longer or shorter than a baseline's: the delta split by part (adding up
    # to it), per job its change, jobs added and gone. `baseline`: a pipeline id of the project; by default the
    # service picks the median of its ref's last 20 ended pipelines before it, and says which. :unanswerable when
    # there is none to compare with (name one).
    def compare_pipeline(project_id:, pipeline_id:, baseline: nil, from: nil, to: nil)
      read(:compare_pipeline, [project_id, "pipelines", pipeline_id, "compare"], baseline: baseline, from: from, to: to)
    end

    # Where the project's durations stepped up or down over a window (optionally on one ref): per job, stage and
    # runner stage, and of the critical path, the pipeline and commit the change began at.
    def regressions(project_id:, from: nil, to: nil, ref: nil)
      read(:regressions, [project_id, "regressions"], from: from, to: to, ref: ref)
    end

    # What wasted runner time over a window, per job name: superseded retries, flaky runs, caches, queue waits; on
    # the critical path or off it, priced when the service is told runner prices.
    def waste(project_id:, from: nil, to: nil)
      read(:waste, [project_id, "waste"], from: from, to: to)
    end

    # Queue wait p50/p95 per runner tag set over a window, by hour or by day, with the most jobs waiting at once.
    def runner_queue(project_id:, from: nil, to: nil)
      read(:runner_queue, [project_id, "runners/queue"], from: from, to: to)
    end

    # What `runners` more (or, negative, fewer) runners of the tag set `tags` (an Array of tags, or them joined by
    # commas) would have changed over the window: queue waits and the affected pipelines' critical paths. A
    # question that changes nothing, sent as a POST only because its arguments are a body.
    def runner_what_if(project_id:, tags:, runners:, from: nil, to: nil)
      read(:runner_what_if, [project_id, "runners/what_if"], {}, what_if_body(tags, runners, from, to))
    end

    # Closes the idle connections (at shutdown; calls after it open new ones).
    def close
      @pool.close
    end

    def inspect
      "#<#{self.class.name} #{@path} deadline=#{@deadline}>"
    end

    private

    # Fills `call` and returns the payload to hand out (nil: the request's own).
    def exchange(request, sent, deadline, call)
      changes = @answer == :changes && Answer.appliable?(sent)
      job = Answer.field(request, "job")
      body = JSON.generate(changes ? { "runner" => Answer.field(request, "runner"), "job" => job } : request)
      status, text = post(body, token.current, deadline, changes ? CHANGES_HEADERS : HEADERS)
      call.status = status
      case status
      when 200
        call.outcome, payload, call.reason = changes ? Answer.read_changes(text, sent, Answer.field(job, "id")) : Answer.read(text, sent)
        payload
      when 401, 403
        fail_with(call, :unauthorized, service_error(text))
        nil
      else
        fail_with(call, :http_error, service_error(text))
        nil
      end
    end

    # One POST of the decorator: [status, body].
    def post(body, token, deadline, headers)
      request = Net::HTTP::Post.new(@path, headers.merge(InternalApiToken::HEADER_NAME => token))
      request.body = body
      status, text, = pooled(request, deadline, body.bytesize * 2 + ANSWER_SLACK_BYTES, body.bytesize + 4096)
      [status, text]
    end

    # One request on a pooled connection: [status, body, Retry-After]. A connection that served a request before
    # may have been closed by the service meanwhile; such a failure is tried once more on a new one (decorating a
    # job twice is harmless: the grant keeps its first expiry, SPEC §4; a read changes nothing), within the same
    # deadline.
    def pooled(request, deadline, limit, capacity)
      attempts = 0
      begin
        connection = @pool.checkout
        reused = connection.requests.positive?
        answer = request_on(connection, request, deadline, limit, capacity)
        @pool.checkin(connection)
        answer
      rescue EOFError, Errno::ECONNRESET, Errno::EPIPE
        @pool.discard(connection)
        attempts += 1
        retry if reused && attempts == 1
        raise
      rescue StandardError
        @pool.discard(connection) if connection
        raise
      end
    end

    def request_on(connection, request, deadline, limit, capacity)
      connection.deadline = deadline
      connection.start unless connection.started?
      status = nil
      retry_after = nil
      text = String.new(capacity: capacity)
      connection.request(request) do |response|
        status = response.code.to_i
        retry_after = response["Retry-After"]
        raise AnswerTooLarge, "answer over #{limit} bytes" if response.content_length.to_i > limit

        response.read_body do |chunk|
          text << chunk
          raise AnswerTooLarge, "answer over #{limit} bytes" if text.bytesize > limit
        end
      end
      [status, text.force_encoding(Encoding::UTF_8), retry_after]
    end

    # One read: a Read, whatever happens. Only the service's failures count against the reads' breaker: a 404, a 400
    # or a 422 is an answer. `body`, a Proc making the fields (refusing bad ones with an ArgumentError, as a bad id
    # is), makes it a POST of them as JSON; otherwise it is a GET.
    def read(operation, segments, query, body = nil)
      started = monotonic
      call = Call.new(outcome: :error, operation: operation)
      read = Read.new
      path = read_path(segments, query)
      sent = body && json_body(body.call)
      unless @read_breaker.allow?
        call.outcome = :skipped
        return finish_read(call, read, started)
      end

      begin
        status, text, retry_after = ask(path, sent, token.current, started + @read_deadline)
        call.status = status
        case status
        when 200
          read.data = Answer.parse(text)
          call.outcome = :read
        when 404 then call.outcome = :not_found
        when 400 then call.outcome = :bad_request
        when 422 then call.outcome = :unanswerable
        when 503
          call.outcome = :unavailable
          read.retry_after = Integer(retry_after, exception: false)
        when 401, 403 then call.outcome = :unauthorized
        else call.outcome = :http_error
        end
        call.error = service_error(text) unless status == 200
      rescue StandardError => e
        failed(call, e)
      ensure
        READ_FAILURES.include?(call.outcome) ? @read_breaker.failure : @read_breaker.success
      end
      finish_read(call, read, started)
    rescue ArgumentError => e
      # An id that is not a positive integer, a time that is not one, a body that is not one: nothing is asked.
      fail_with(call, :bad_request, e.message)
      finish_read(call, read, started)
    end

    # A GET, or with a body a POST, on the same pool as the decorator's calls.
    def ask(path, body, token, deadline)
      headers = HEADERS.merge(InternalApiToken::HEADER_NAME => token)
      request = body.nil? ? Net::HTTP::Get.new(path, headers) : Net::HTTP::Post.new(path, headers)
      request.body = body unless body.nil?
      pooled(request, deadline, @max_read_bytes, 64 * 1024)
    end

    # The what-if's body, checked here as ids and times are: the tags as GitLab keeps them (an Array) or as text.
    def what_if_body(tags, runners, from, to)
      lambda do
        text = tags.is_a?(Array) && tags.all?(String) ? tags.join(",") : tags
        raise ArgumentError, "tags must be the runners' tags, an Array of them or them joined by commas" unless text.is_a?(String)
        raise ArgumentError, "runners must be a whole number of runners to add" unless runners.is_a?(Integer)

        { "tags" => text, "runners" => runners, "from" => from && iso8601(from), "to" => to && iso8601(to) }.compact
      end
    end

    # A body that cannot be JSON (text that is not UTF-8) is the caller's mistake: refused, its text not quoted.
    def json_body(fields)
      JSON.generate(fields)
    rescue JSON::GeneratorError, EncodingError
      raise ArgumentError, "the body cannot be sent as JSON: its text must be UTF-8"
    end

    # /internal/ci/telemetry/projects/7/pipelines/500/trace?from=…&to=…: ids as positive integers, times in ISO 8601.
    def read_path(segments, query)
      path = segments.each_with_index.map do |segment, index|
        next segment if index.odd?

        positive_id(segment, index.zero? ? "project_id" : "#{segments[index - 1].chomp('s')}_id")
      end
      parameters = query.compact.map { |name, value| [name.to_s, query_value(name, value)] }
      "#{@reads_path}/#{path.join('/')}#{parameters.empty? ? '' : "?#{URI.encode_www_form(parameters)}"}"
    end

    def positive_id(value, name)
      id = value.is_a?(Integer) || value.is_a?(String) ? Integer(value, exception: false) : nil
      raise ArgumentError, "#{name} must be a positive integer" unless id&.positive?

      id.to_s
    end

    def query_value(name, value)
      case name
      when :ref then value.to_s
      when :baseline then positive_id(value, "baseline")
      else iso8601(value)
      end
    end

    def iso8601(time)
      return time.utc.iso8601(3) if time.respond_to?(:utc)

      Time.iso8601(String(time)).utc.iso8601(3)
    end

    def finish_read(call, read, started)
      read.data = nil unless call.outcome == :read
      read.outcome = call.outcome
      read.status = call.status
      read.error = call.error
      call.duration = monotonic - started
      call.breaker = @read_breaker.state
      begin
        @on_call&.call(call)
      rescue StandardError
        nil
      end
      read
    end

    # The service's own words for a refusal (its errors never hold a token); a foreign body is not quoted.
    def service_error(text)
      message = JSON.parse(text)["error"]
      message.is_a?(String) ? message[0, 200] : nil
    rescue StandardError
      nil
    end

    def token
      @token ||= begin
        InternalApiToken.new(InternalApiToken.read_secret(@secret_file), issuer: @issuer)
      rescue SystemCallError => e
        raise InternalApiToken::InvalidSecret, "cannot read the secret file (#{e.class.name})"
      end
    end

    # What an exception raised by a call makes of it: its outcome, and an error that never quotes what was sent.
    def failed(call, error)
      case error
      when Net::OpenTimeout, Net::ReadTimeout, Net::WriteTimeout then fail_with(call, :timeout, error.class.name)
      when Answer::Invalid, AnswerTooLarge then fail_with(call, :invalid_answer, error.message)
      when Net::HTTPBadResponse, Net::HTTPHeaderSyntaxError then fail_with(call, :invalid_answer, error.class.name)
      when EOFError, IOError, SystemCallError, SocketError, OpenSSL::SSL::SSLError
        fail_with(call, :unreachable, error.class.name)
      when InternalApiToken::InvalidSecret then fail_with(call, :error, error.message)
      # The class only: the message of an unforeseen error may quote the payload (a JSON::GeneratorError does).
      else fail_with(call, :error, error.class.name)
      end
    end

    def fail_with(call, outcome, error)
      call.outcome = outcome
      call.error = error
    end

    def report(call, started, payload)
      call.duration = monotonic - started
      call.breaker = @breaker.state
      begin
        @on_call&.call(call)
      rescue StandardError
        nil
      end
      payload
    end

    def monotonic
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end
  end
end
