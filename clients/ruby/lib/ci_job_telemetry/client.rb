# frozen_string_literal: true

require "json"
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
  Call = Struct.new(:outcome, :duration, :reason, :status, :error, :breaker, keyword_init: true)

  # The decorator's client for GitLab's job-request API (SPEC §4). #decorate returns the decorated payload, or
  # the request's own payload whenever anything goes wrong; it never raises, and every wait it makes ends by its
  # deadline. Safe to share between threads: build one per process and keep it.
  class Client
    PATH = "/internal/ci/telemetry/job_payload"
    FAILURES = %i[timeout unreachable unauthorized http_error invalid_answer error].freeze
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

    class AnswerTooLarge < StandardError; end

    # - base_url: the service's internal API, e.g. "http://ci-job-telemetry:8080" (a path prefix is kept).
    # - secret_file: the file of INTERNAL_API_SECRET_FILE (base64); read on first use, so a missing file makes
    #   calls fail open instead of stopping the application from booting.
    # - deadline: seconds a call may take in all (connect, write, read, parse).
    # - on_call: called with a Call after every #decorate, in the caller's thread; what it raises is ignored.
    # - breaker: a Breaker, or the options of one (threshold:, window:, cool_off:).
    # - pool_size: idle keep-alive connections kept (the threads that call at once, e.g. Puma's max threads).
    # - keep_alive: seconds an idle connection is reused; below the service's idle timeout (Fastify's 72 s).
    def initialize(base_url:, secret_file:, deadline: 0.05, issuer: "gitlab", on_call: nil, breaker: {}, pool_size: 8, keep_alive: 30)
      uri = URI(base_url)
      raise ArgumentError, "base_url must be an http or https URL" unless %w[http https].include?(uri.scheme) && uri.host

      @path = "#{uri.path.chomp('/')}#{PATH}"
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

    attr_reader :breaker

    # :closed, :open or :half_open.
    def breaker_state
      @breaker.state
    end

    # The decorated `payload` of `request` (the decorator's request body: runner, job, payload, with string or
    # symbol keys), or the request's own payload object, untouched.
    def decorate(request)
      started = monotonic
      sent = Answer.field(request, "payload")
      return report(Call.new(outcome: :skipped), started, sent) unless @breaker.allow?

      call = Call.new(outcome: :error)
      payload = sent
      begin
        payload = exchange(request, sent, started + @deadline, call) || sent
      rescue Net::OpenTimeout, Net::ReadTimeout, Net::WriteTimeout => e
        fail_with(call, :timeout, e.class.name)
      rescue Answer::Invalid, AnswerTooLarge => e
        fail_with(call, :invalid_answer, e.message)
      rescue Net::HTTPBadResponse, Net::HTTPHeaderSyntaxError => e
        fail_with(call, :invalid_answer, e.class.name)
      rescue EOFError, IOError, SystemCallError, SocketError, OpenSSL::SSL::SSLError => e
        fail_with(call, :unreachable, e.class.name)
      rescue InternalApiToken::InvalidSecret => e
        fail_with(call, :error, e.message)
      rescue StandardError => e
        # The class only: the message of an unforeseen error may quote the payload (a JSON::GeneratorError does).
        fail_with(call, :error, e.class.name)
      ensure
        # Always, even for an exception not rescued here: a probe that never reported would hold the breaker
        # half open, skipping every call, for good.
        FAILURES.include?(call.outcome) ? @breaker.failure : @breaker.success
      end
      payload = sent if FAILURES.include?(call.outcome)
      report(call, started, payload)
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
      body = JSON.generate(request)
      status, text = post(body, token.current, deadline)
      call.status = status
      case status
      when 200
        call.outcome, payload, call.reason = Answer.read(text, sent)
        payload
      when 401, 403
        fail_with(call, :unauthorized, service_error(text))
        nil
      else
        fail_with(call, :http_error, service_error(text))
        nil
      end
    end

    # One POST on a pooled connection: [status, body]. A connection that served a request before may have been
    # closed by the service meanwhile; such a failure is tried once more on a new one (decorating a job twice is
    # harmless: the grant keeps its first expiry, SPEC §4), within the same deadline.
    def post(body, token, deadline)
      attempts = 0
      begin
        connection = @pool.checkout
        reused = connection.requests.positive?
        answer = post_on(connection, body, token, deadline)
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

    def post_on(connection, body, token, deadline)
      connection.deadline = deadline
      connection.start unless connection.started?
      request = Net::HTTP::Post.new(@path, HEADERS.merge(InternalApiToken::HEADER_NAME => token))
      request.body = body
      limit = body.bytesize * 2 + ANSWER_SLACK_BYTES
      status = nil
      text = String.new(capacity: body.bytesize + 4096)
      connection.request(request) do |response|
        status = response.code.to_i
        raise AnswerTooLarge, "answer over #{limit} bytes" if response.content_length.to_i > limit

        response.read_body do |chunk|
          text << chunk
          raise AnswerTooLarge, "answer over #{limit} bytes" if text.bytesize > limit
        end
      end
      [status, text.force_encoding(Encoding::UTF_8)]
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
