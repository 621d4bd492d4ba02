"""A LangGraph agent with one tool, recorded with the graph untouched: wrap_openai on the
chat model's own client records each model call (and serves it in a replay), and
evalkit.record.langchain.Handler hears each tool call through LangChain's callbacks.

By evalkit: evalkit run --suite my-suite --out runs/graph -- python langgraph_agent.py
Needs the langgraph extra: pip install 'evalkit[langgraph]'. OPENAI_BASE_URL and
OPENAI_API_KEY as usual; the key is never recorded.
"""

import os
import sys

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

import evalkit.record as record
from evalkit.record.langchain import Handler


@tool
def multiply(a: float, b: float) -> float:
    """a times b"""
    return a * b


chat = ChatOpenAI(model=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"),
                  base_url=os.environ.get("OPENAI_BASE_URL"))
record.wrap_openai(chat.root_client)  # model calls: recorded, and replayed, here
model = chat.bind_tools([multiply])
graph = StateGraph(MessagesState)
graph.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
graph.add_node("tools", ToolNode([multiply]))
graph.add_edge(START, "agent")
graph.add_conditional_edges("agent", tools_condition)
graph.add_edge("tools", "agent")
agent = graph.compile()

objective = sys.argv[1]
with record.mission(objective, suite_key=os.environ.get("MISSION_KEY"),
                    catalogue=["multiply"]) as m:
    state = agent.invoke({"messages": [("user", objective)]}, {"callbacks": [Handler(models=False)]})
    m.answer(state["messages"][-1].content)
