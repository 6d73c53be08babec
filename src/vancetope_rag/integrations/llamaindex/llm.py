"""LlamaIndex chat integration: every chat call gets the turn's ``pre_turn`` system messages.

:class:`RagContextLLM` wraps the LLM a host already uses. Before each ``chat`` / ``achat`` /
``stream_chat`` / ``astream_chat`` (and the ``*_with_tools`` variants agents call) it asks
:meth:`RagApp.pre_turn <vancetope_rag.app.RagApp.pre_turn>` for the turn's system messages —
the ``<rag-context>`` block of spec §5 and whatever plugins add — and inserts them as system
messages right after the host's own leading system (and memory) messages, before the
conversation. ``complete`` and friends pass through unchanged. Because it is itself an LLM, it
drops into ``SimpleChatEngine``, ``ContextChatEngine``, ``FunctionAgent`` or ``ReActAgent``
wherever the inner LLM would go; metadata (context window, function calling) is the inner LLM's.

Each chat call of an agent step runs ``pre_turn`` again (one query embedding), so every LLM
call of a turn sees the block; injected messages live only in the LLM input, never in the
host's memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import LLM, ToolSelection

from vancetope_rag.integrations.llamaindex.messages import (
    INJECTED_KEY,
    inject_system_messages,
    last_user_turn,
)
from vancetope_rag.secrets import get_logger

if TYPE_CHECKING:
    from llama_index.core.tools.types import BaseTool

    from vancetope_rag.app import RagApp
    from vancetope_rag.recipes import RagParams

__all__ = [
    "INJECTED_KEY",
    "RagContextLLM",
    "inject_system_messages",
    "last_user_turn",
]

log = get_logger(__name__)


class RagContextLLM(FunctionCallingLLM):
    """An LLM wrapper that adds the project's ``pre_turn`` system messages to every chat call.

    Example:
        >>> llm = RagContextLLM(OpenAI(model="gpt-4o-mini"), app, "acme", "handbook")
        >>> engine = SimpleChatEngine.from_defaults(llm=llm, system_prompt="You help.")

    Function calling works when the inner LLM is a ``FunctionCallingLLM``: tool preparation,
    tool-call parsing and validation are the inner LLM's. ``pre_turn`` failures are logged and
    the call goes on without extra messages; a turn never fails because of RAG.
    """

    llm: LLM = Field(description="The wrapped LLM that answers.")
    tenant_id: str = Field(description="Tenant whose project context is injected.")
    project_id: str = Field(description="Project whose _documents RAG is queried.")

    _app: RagApp = PrivateAttr()
    _recipe: RagParams | None = PrivateAttr(default=None)

    def __init__(
        self,
        llm: LLM,
        app: RagApp,
        tenant_id: str,
        project_id: str,
        recipe: RagParams | None = None,
        **kwargs: Any,
    ) -> None:
        """Wrap ``llm`` for one tenant's project.

        Args:
            llm: The LLM that answers (any LlamaIndex ``LLM``).
            app: The wired :class:`~vancetope_rag.app.RagApp`.
            tenant_id: Tenant of the conversation.
            project_id: Project of the conversation.
            recipe: The recipe's ``params.rag`` (AutoInject stance, minScore, topK, template).
            **kwargs: Other ``LLM`` fields; prompts and callbacks default to the inner LLM's.
        """
        kwargs.setdefault("callback_manager", llm.callback_manager)
        kwargs.setdefault("system_prompt", llm.system_prompt)
        kwargs.setdefault("messages_to_prompt", llm.messages_to_prompt)
        kwargs.setdefault("completion_to_prompt", llm.completion_to_prompt)
        kwargs.setdefault("pydantic_program_mode", llm.pydantic_program_mode)
        super().__init__(llm=llm, tenant_id=tenant_id, project_id=project_id, **kwargs)
        self._app = app
        self._recipe = recipe

    @classmethod
    def class_name(cls) -> str:
        return "RagContextLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return self.llm.metadata

    @property
    def app(self) -> RagApp:
        return self._app

    @property
    def recipe(self) -> RagParams | None:
        return self._recipe

    # -- the injection ------------------------------------------------------------------

    def turn_messages(
        self, messages: Sequence[ChatMessage], tools: Sequence[BaseTool] | None = None
    ) -> list[str]:
        """The system message texts ``pre_turn`` gives for this input ([] on any failure);
        ``tools``: the tools of this call (the ``*_with_tools`` methods pass theirs)."""
        try:
            return self._app.pre_turn(
                self.tenant_id,
                self.project_id,
                last_user_turn(messages),
                self._recipe,
                tools=None if tools is None else list(tools),
            )
        except Exception as exc:  # a plugin's bug must not cost the user the answer
            self._warn(exc)
            return []

    async def aturn_messages(
        self, messages: Sequence[ChatMessage], tools: Sequence[BaseTool] | None = None
    ) -> list[str]:
        """:meth:`turn_messages` through :meth:`RagApp.apre_turn`: retrieval (embedding,
        store) runs in a worker thread, never on the event loop."""
        try:
            return await self._app.apre_turn(
                self.tenant_id,
                self.project_id,
                last_user_turn(messages),
                self._recipe,
                tools=None if tools is None else list(tools),
            )
        except Exception as exc:
            self._warn(exc)
            return []

    def _warn(self, exc: Exception) -> None:
        log.warning(
            "pre_turn failed for %s/%s; the turn goes on without it: %s: %s",
            self.tenant_id,
            self.project_id,
            type(exc).__name__,
            exc,
        )

    def _inject(
        self, messages: Sequence[ChatMessage], tools: Sequence[BaseTool] | None = None
    ) -> list[ChatMessage]:
        return inject_system_messages(messages, self.turn_messages(messages, tools))

    async def _ainject(
        self, messages: Sequence[ChatMessage], tools: Sequence[BaseTool] | None = None
    ) -> list[ChatMessage]:
        return inject_system_messages(messages, await self.aturn_messages(messages, tools))

    def _inject_turn(
        self,
        user_msg: str | ChatMessage | None,
        chat_history: list[ChatMessage] | None,
        tools: Sequence[BaseTool],
    ) -> list[ChatMessage]:
        """Inject into a ``(user_msg, chat_history)`` pair: the blocks go into the history."""
        history = list(chat_history or [])
        full = [*history, *self._as_messages(user_msg)]
        return inject_system_messages(history, self.turn_messages(full, tools))

    async def _ainject_turn(
        self,
        user_msg: str | ChatMessage | None,
        chat_history: list[ChatMessage] | None,
        tools: Sequence[BaseTool],
    ) -> list[ChatMessage]:
        history = list(chat_history or [])
        full = [*history, *self._as_messages(user_msg)]
        return inject_system_messages(history, await self.aturn_messages(full, tools))

    @staticmethod
    def _as_messages(user_msg: str | ChatMessage | None) -> list[ChatMessage]:
        if user_msg is None:
            return []
        if isinstance(user_msg, str):
            return [ChatMessage(role=MessageRole.USER, content=user_msg)]
        return [user_msg]

    def _function_llm(self) -> FunctionCallingLLM:
        if not isinstance(self.llm, FunctionCallingLLM):
            raise TypeError(
                f"{type(self.llm).__name__} does not support function calling; "
                "wrap a FunctionCallingLLM or use a ReActAgent"
            )
        return self.llm

    # -- chat: injected -----------------------------------------------------------------

    # A ``tools`` keyword (what LLMs that take tools in chat() are given) is passed on to
    # pre_turn too, so AutoInject knows the model may retrieve for itself.

    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self.llm.chat(self._inject(messages, kwargs.get("tools")), **kwargs)

    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        return self.llm.stream_chat(self._inject(messages, kwargs.get("tools")), **kwargs)

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return await self.llm.achat(await self._ainject(messages, kwargs.get("tools")), **kwargs)

    async def astream_chat(
        self, messages: Sequence[ChatMessage], **kwargs: Any
    ) -> ChatResponseAsyncGen:
        injected = await self._ainject(messages, kwargs.get("tools"))
        return await self.llm.astream_chat(injected, **kwargs)

    # -- completion: passed through ------------------------------------------------------

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return self.llm.complete(prompt, formatted=formatted, **kwargs)

    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        return self.llm.stream_complete(prompt, formatted=formatted, **kwargs)

    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        return await self.llm.acomplete(prompt, formatted=formatted, **kwargs)

    async def astream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseAsyncGen:
        return await self.llm.astream_complete(prompt, formatted=formatted, **kwargs)

    # -- function calling: the inner LLM's, with the blocks in the history ---------------
    # Delegating the whole *_with_tools call (not only _prepare_chat_with_tools) keeps inner
    # LLMs that override it working; the inner LLM then calls its own chat, so the blocks are
    # added exactly once.

    def chat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> ChatResponse:
        inner = self._function_llm()
        return inner.chat_with_tools(
            tools,
            user_msg=user_msg,
            chat_history=self._inject_turn(user_msg, chat_history, tools),
            verbose=verbose,
            allow_parallel_tool_calls=allow_parallel_tool_calls,
            tool_required=tool_required,
            **kwargs,
        )

    async def achat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> ChatResponse:
        inner = self._function_llm()
        return await inner.achat_with_tools(
            tools,
            user_msg=user_msg,
            chat_history=await self._ainject_turn(user_msg, chat_history, tools),
            verbose=verbose,
            allow_parallel_tool_calls=allow_parallel_tool_calls,
            tool_required=tool_required,
            **kwargs,
        )

    def stream_chat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> ChatResponseGen:
        inner = self._function_llm()
        return inner.stream_chat_with_tools(
            tools,
            user_msg=user_msg,
            chat_history=self._inject_turn(user_msg, chat_history, tools),
            verbose=verbose,
            allow_parallel_tool_calls=allow_parallel_tool_calls,
            tool_required=tool_required,
            **kwargs,
        )

    async def astream_chat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> ChatResponseAsyncGen:
        inner = self._function_llm()
        return await inner.astream_chat_with_tools(
            tools,
            user_msg=user_msg,
            chat_history=await self._ainject_turn(user_msg, chat_history, tools),
            verbose=verbose,
            allow_parallel_tool_calls=allow_parallel_tool_calls,
            tool_required=tool_required,
            **kwargs,
        )

    def _prepare_chat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        # The result feeds self.chat(), which adds the blocks; do not add them here too.
        return self._function_llm()._prepare_chat_with_tools_compat(
            tools,
            user_msg=user_msg,
            chat_history=chat_history,
            verbose=verbose,
            allow_parallel_tool_calls=allow_parallel_tool_calls,
            tool_required=tool_required,
            **kwargs,
        )

    def _validate_chat_with_tools_response(
        self,
        response: ChatResponse,
        tools: Sequence[BaseTool],
        allow_parallel_tool_calls: bool = False,
        **kwargs: Any,
    ) -> ChatResponse:
        return self._function_llm()._validate_chat_with_tools_response(
            response, tools, allow_parallel_tool_calls=allow_parallel_tool_calls, **kwargs
        )

    def get_tool_calls_from_response(
        self,
        response: ChatResponse,
        error_on_no_tool_call: bool = True,
        **kwargs: Any,
    ) -> list[ToolSelection]:
        return self._function_llm().get_tool_calls_from_response(
            response, error_on_no_tool_call=error_on_no_tool_call, **kwargs
        )
